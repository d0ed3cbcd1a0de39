"""SARIF 2.1.0 (what code-scanning tabs read): one rule per kind of finding (check / status), one result per failing
tensor at the line of code behind it (and one for what a run of the model did wrong: ``compare``, ``trace``), ``partialFingerprints`` stable across runs and machines; models that could not be
checked are the invocation's error notifications."""

from __future__ import annotations

import json
import site
import sysconfig
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ..report import Status
from ._rows import Row

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

CHECK_HELP = {
    "non_persistent_buffer": "A non-persistent buffer is not what the model's code computes. transformers 5 gives every "
    "non-persistent buffer fresh memory on load and restores only what _init_weights rebuilds: rebuild it there.",
    "checkpoint_fidelity": "A weight the checkpoint holds differs from the checkpoint after loading: code (usually an "
    "unguarded _init_weights) overwrote it. Guard the initialization so it leaves loaded weights alone.",
    "missing_key": "A tensor the checkpoint lacks was never initialized (whatever transformers reports): give it an "
    "_init_weights branch, or save a checkpoint that holds it.",
    "meta_leftover": "A tensor is still on the meta device after loading: it has no value at all. Register it as a buffer "
    "that _init_weights rebuilds, or compute it in forward.",
    "tied_weights": "A tied weight is not the same tensor as its source and holds other values: the tie was not applied.",
    "runs": "The loaded model's forward or generate raised on inputs built from its config (audit --forward): code "
    "written for another transformers calls what this one does not have, or a tensor the load left wrong broke it.",
}
STATUS_TEXT = {
    Status.UNINITIALIZED: "holds leftover memory",
    Status.MISMATCH: "differs from what the code and checkpoint define",
    Status.ON_META: "is still on the meta device",
    Status.OVERWRITTEN: "was overwritten after loading",
    Status.CRASHED: "raised when the model ran",
}
RUN_HELP = {
    "raised": (
        "the loaded model raised where its reference runs",
        "The model as from_pretrained left it raises in this "
        "module, and the same model built eagerly from its code and checkpoint does not: the tensors the load left "
        "wrong there are the cause. Repair them (loadguard audit --repair) or rebuild them in _init_weights.",
    ),
    "differ": (
        "the loaded model's outputs differ from its reference's",
        "Greedy generation with the model as "
        "from_pretrained left it differs from the same model built eagerly: the tensors the load left wrong are "
        "named with it.",
    ),
    "non_finite": (
        "NaN/Inf first came out of this module",
        "One forward pass of the loaded model produced NaN/Inf first "
        "in this module: the non-finite tensors in it or around it are the likely origin.",
    ),
}


def _rule(check: str, status: str) -> dict[str, Any]:
    help_text = CHECK_HELP.get(check, "A tensor is not what the model's code and checkpoint define.")
    short = f"{check.replace('_', ' ')}: a tensor {STATUS_TEXT.get(status, status)}"
    if check in ("compare", "trace") and status in RUN_HELP:
        short, help_text = f"{check}: {RUN_HELP[status][0]}", RUN_HELP[status][1]
    return {
        "id": f"{check}/{status}",
        "name": "".join(part.title() for part in f"{check}_{status}".split("_")),
        "shortDescription": {"text": short},
        "fullDescription": {"text": help_text},
        "help": {"text": help_text, "markdown": help_text},
        "defaultConfiguration": {"level": "error"},
    }


def _site_packages() -> str:
    paths = [sysconfig.get_paths().get("purelib")] + (
        site.getsitepackages() if hasattr(site, "getsitepackages") else []
    )
    return next((p for p in paths if p and Path(p).is_dir()), "")


def _problems(row: Row):
    """``(rule id, text, item)`` for each failing finding of ``row`` and its run failure (``item`` has the location)."""
    for finding in row.failures:
        yield f"{finding.check}/{finding.status}", f"{finding.tensor} ({finding.status}): {finding.detail}", finding
    if row.run_failure is not None:
        yield f"{row.mode}/{row.run_failure.kind}", row.run_failure.message, row.run_failure


def _result(row: Row, rule_id: str, text: str, finding, rule_index: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": rule_id,
        "ruleIndex": rule_index,
        "level": "error",
        "message": {"text": f"{row.model}: {text}"},
        "partialFingerprints": {"loadguardFinding/v1": row.fingerprint(finding)},
        "properties": {
            "model": row.model,
            "modelClass": row.model_class,
            "tensor": finding.tensor,
            "mode": row.mode,
            **({"revision": row.revision} if row.revision else {}),
            **({"checkpoint": row.checkpoint} if row.checkpoint else {}),
        },
    }
    location: dict[str, Any] = {"logicalLocations": [{"fullyQualifiedName": finding.tensor, "kind": "member"}]}
    source = row.source(finding)
    if source is not None:
        path, line, in_model = source
        location["physicalLocation"] = {
            "artifactLocation": {
                "uri": Path(path).as_posix(),
                "uriBaseId": "SRCROOT" if in_model else "SITE_PACKAGES",
            },
            "region": {"startLine": line},
        }
    result["locations"] = [location]
    return result


def emit(rows: list[Row], *, command: str = "audit") -> str:

    rules: dict[str, int] = {}
    results = []
    for row in rows:
        for rule_id, text, finding in _problems(row):
            rules.setdefault(rule_id, len(rules))
            results.append(_result(row, rule_id, text, finding, rules[rule_id]))
    notifications = [
        {
            "level": "error",
            "message": {
                "text": f"{row.model} could not be checked: {row.error}" + (f" Hint: {row.hint}" if row.hint else "")
            },
        }
        for row in rows
        if not row.checked
    ]
    run = {
        "tool": {
            "driver": {
                "name": "loadguard",
                "version": version("loadguard"),
                "informationUri": "https://pypi.org/project/loadguard/",
                "rules": [_rule(*rule_id.split("/", 1)) for rule_id in rules],
            }
        },
        "automationDetails": {"id": f"loadguard/{command}/"},
        "originalUriBaseIds": {
            "SRCROOT": {"uri": Path.cwd().as_uri() + "/"},
            "SITE_PACKAGES": {"uri": Path(_site_packages() or "/").as_uri().rstrip("/") + "/"},
        },
        "invocations": [{"executionSuccessful": not notifications, "toolExecutionNotifications": notifications}],
        "results": results,
    }
    return json.dumps({"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2)


__all__ = ["emit"]
