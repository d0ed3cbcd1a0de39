"""``loadguard matrix --native --transformers A,B``: what a release changed, class by class.

Each version's environment (:mod:`loadguard._infra.envs`) runs ``loadguard scan --native`` (its own transformers' auto
mappings, each class in a forked child); the result is the classes whose verdict differs between the versions:
a class that appears or disappears, one that starts or stops losing a tensor, one that no longer builds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._infra import Worker, cell, envs
from ..executors import resolve
from ..report import failing
from .matrices import environment_selfcheck


def verdict(row: dict) -> str:
    if not row.get("scanned"):
        return f"could not build: {row.get('error', '')[:120]}"
    wrong = failing(row["findings"])
    return "clean" if not wrong else ", ".join(sorted(f"{f['tensor']} ({f['status']})" for f in wrong))


@dataclass(frozen=True)
class NativeDiff:
    versions: tuple[str, ...]
    verdicts: dict[str, dict[str, str]]
    """class label -> {version: verdict} (``absent`` where that release has no such class)."""
    errors: dict[str, str] = field(default_factory=dict)
    """version -> why it could not run there."""
    seconds: dict[str, float] = field(default_factory=dict)
    selfchecks: dict[str, dict] = field(default_factory=dict)

    @property
    def changed(self) -> list[str]:
        return sorted(
            label
            for label, row in self.verdicts.items()
            if len({row.get(v, "absent") for v in self.versions if v not in self.errors}) > 1
        )

    def to_dict(self) -> dict:
        return {
            "transformers": list(self.versions),
            "classes": len(self.verdicts),
            "changed": [
                {"class": label, "verdicts": {v: self.verdicts[label].get(v, "absent") for v in self.versions}}
                for label in self.changed
            ],
            "errors": self.errors,
            "selfchecks": self.selfchecks,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
        }


def _native_in(item) -> tuple[str | None, list[dict], float, dict | None]:
    """One executor item: a version's classes scanned in its environment (``error`` when none could be)."""
    version, arguments = item
    start = time.perf_counter()
    environment = envs.environment(version)
    if not environment.ok:
        return f"not installable here: {environment.reason}", [], 0.0, None
    worker = Worker(environment)
    try:
        check = environment_selfcheck(worker)
        result = worker.run(arguments)
    finally:
        worker.close()
    rows = []
    for line in result["stdout"].splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    error = None
    if not rows:
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        error = lines[-1] if lines else f"exit {result['returncode']}"
    return error, rows, time.perf_counter() - start, check


def run(
    versions: Sequence[str],
    *,
    match: str | None = None,
    tasks: str | None = None,
    jobs: int = 1,
    timeout: float = 300.0,
    memory_limit: str = "auto",
    executor=None,
) -> NativeDiff:
    """Every auto-mapped class of each version, scanned there (a version an item of ``executor``, one at a time; its
    classes ``jobs`` at a time); the verdicts side by side."""

    arguments = [
        "scan",
        "--native",
        "--format",
        "json",
        "--jobs",
        str(jobs),
        "--timeout",
        str(timeout),
        "--memory-limit",
        memory_limit,
    ]
    arguments += ["--match", match] if match else []
    arguments += ["--tasks", tasks] if tasks else []
    verdicts: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    checks: dict[str, dict] = {}
    outcomes = resolve(executor).map(_native_in, [(version, arguments) for version in versions])
    for version, outcome in zip(versions, outcomes):
        error, rows, took, check = (
            outcome.value if outcome.ok else (f"its run did not finish: {outcome.error}", [], 0.0, None)
        )
        if check is not None:
            checks[version] = check
        if error:
            errors[version] = error
        for row in rows:
            verdicts.setdefault(row["model"], {})[version] = verdict(row)
        if took:
            seconds[version] = took
    return NativeDiff(tuple(versions), verdicts, errors, seconds, checks)


def markdown(diff: NativeDiff) -> str:

    lines = [
        "| class | " + " | ".join(f"transformers {v}" for v in diff.versions) + " |",
        "|---" * (len(diff.versions) + 1) + "|",
    ]
    for label in diff.changed:
        cells = [cell(diff.verdicts[label].get(v, "absent")) for v in diff.versions]
        lines.append(f"| {cell(label)} | " + " | ".join(cells) + " |")
    if not diff.changed:
        lines.append("| (none) | " + " | ".join("same verdicts" for _ in diff.versions) + " |")
    return "\n".join(lines)


__all__ = ["NativeDiff", "markdown", "run", "verdict"]
