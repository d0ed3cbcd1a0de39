"""``loadguard matrix --diff A B``: per model, how the verdict moved from one transformers version to another, the
release gate's question ("is this bump safe for the models we cover?").

Example::

    result = loadguard.matrix(models, ["5.24.0", "5.25.0"])
    for change in diff(result, "5.24.0", "5.25.0"):
        if change.worse:
            print(change.model, change.change, change.added)
"""

from __future__ import annotations

from dataclasses import dataclass

from .._infra import cell
from ..report import CellStatus, FixStatus, failing
from .matrices import Matrix


@dataclass(frozen=True)
class VerdictChange:
    """How one model's verdict moved from transformers ``before`` to ``after``: ``change`` is ``unchanged``, ``fixed``,
    ``new failure``, ``changed finding`` (both fail, differently: ``added`` / ``removed`` say how), ``newly broken``
    (it could be checked before and cannot now), ``now checkable``, or ``not compared`` (a version unavailable here)."""

    model: str
    before: str
    after: str
    change: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def worse(self) -> bool:
        return self.change in ("new failure", "changed finding", "newly broken")

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "before": self.before,
            "after": self.after,
            "change": self.change,
            "worse": self.worse,
            "added": list(self.added),
            "removed": list(self.removed),
        }


def diff(result: Matrix, before: str, after: str) -> tuple[VerdictChange, ...]:
    """Per model, the verdict change from ``before`` to ``after`` (two of ``result``'s versions): the answer to "is this
    transformers bump safe for these models"."""
    out = []
    for model in result.models:
        a, b = result.cell(model, before), result.cell(model, after)
        tensors_a = {f"{f['tensor']} ({f['status']})" for f in failing(a.report["findings"])} if a.report else set()
        tensors_b = {f"{f['tensor']} ({f['status']})" for f in failing(b.report["findings"])} if b.report else set()
        if CellStatus.UNAVAILABLE in (a.status, b.status):
            change = "not compared"
        elif a.status == CellStatus.ERROR or b.status == CellStatus.ERROR:
            change = (
                "unchanged"
                if a.status == b.status == CellStatus.ERROR
                else "newly broken"
                if b.status == CellStatus.ERROR
                else "now checkable"
            )
        elif tensors_a == tensors_b:
            change = "unchanged"
        elif not tensors_b:
            change = FixStatus.FIXED
        elif not tensors_a:
            change = "new failure"
        else:
            change = "changed finding"
        out.append(
            VerdictChange(
                model,
                a.verdict(),
                b.verdict(),
                change,
                tuple(sorted(tensors_b - tensors_a)),
                tuple(sorted(tensors_a - tensors_b)),
            )
        )
    return tuple(out)


def changes_markdown(changes) -> str:

    lines = ["| model | change | before | after |", "|---|---|---|---|"]
    for c in changes:
        lines.append("| " + " | ".join(cell(x) for x in (c.model, c.change, c.before, c.after)) + " |")
    return "\n".join(lines)


__all__ = ["VerdictChange", "changes_markdown", "diff"]
