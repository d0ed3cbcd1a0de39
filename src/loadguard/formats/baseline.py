"""Baselines: the findings a team already knows about, by fingerprint (:meth:`Row.fingerprint`: the model's identity,
the tensor and what is wrong with it), so a large model list can adopt loadguard and fail only on what is new.

Example::

    write(rows, "loadguard-baseline.json")          # loadguard scan --from models.txt --write-baseline FILE
    kept, known, fixed = apply(rows, read("loadguard-baseline.json"))
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .._infra import write_atomically
from ..errors import InvalidOptionError
from ._rows import Row

VERSION = 1


def entries(rows: list[Row]) -> dict[str, dict[str, str]]:
    """Every failing finding of ``rows``: fingerprint -> what it is, in words."""
    return {
        row.fingerprint(f): {
            "model": row.model,
            "identity": row.identity,
            "tensor": f.tensor,
            "check": f.check,
            "status": f.status,
        }
        for row in rows
        for f in row.failures
    }


def write(rows: list[Row], path: str | Path) -> int:
    """Write the failing findings of ``rows`` as a baseline; returns how many."""
    found = entries(rows)
    document = {"schema_version": VERSION, "tool": "loadguard", "findings": dict(sorted(found.items()))}
    write_atomically(Path(path), json.dumps(document, indent=2) + "\n")
    return len(found)


def read(path: str | Path) -> dict[str, dict[str, str]]:
    try:
        document = json.loads(Path(path).read_text())
        findings = document["findings"]
        if document.get("schema_version") != VERSION or not isinstance(findings, dict):
            raise ValueError(f"schema_version {document.get('schema_version')!r}")
    except OSError as error:
        raise InvalidOptionError(
            f"--baseline {path}: {error.strerror}", "write one first with --write-baseline FILE"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InvalidOptionError(
            f"--baseline {path} is not a loadguard baseline ({error})", "write it again with --write-baseline FILE"
        ) from None
    return findings


def report(known: int, fixed: list[dict[str, str]], path: str) -> str:
    """The line a command prints after applying a baseline."""
    text = f"baseline {path}: {known} known finding(s) not shown"
    if fixed:
        listed = ", ".join(f"{entry['tensor']} ({entry['model']})" for entry in fixed[:8])
        text += f"; fixed since: {listed}" + (f" and {len(fixed) - 8} more" if len(fixed) > 8 else "")
    return text


def apply(rows: list[Row], baseline: dict[str, dict[str, str]]) -> tuple[list[Row], int, list[dict[str, str]]]:
    """``rows`` without the findings the baseline knows; how many were known; the baseline's findings of these models
    that are gone (fixed)."""
    kept, known, seen = [], 0, set()
    for row in rows:
        fresh = []
        for finding in row.findings:
            fingerprint = row.fingerprint(finding) if finding.failing else None
            if fingerprint in baseline:
                known += 1
                seen.add(fingerprint)
            else:
                fresh.append(finding)
        kept.append(dataclasses.replace(row, findings=tuple(fresh)))
    models = {row.identity for row in rows if row.checked}
    fixed = [
        entry for fingerprint, entry in baseline.items() if fingerprint not in seen and entry.get("identity") in models
    ]
    return kept, known, fixed


__all__ = ["apply", "entries", "read", "report", "write"]
