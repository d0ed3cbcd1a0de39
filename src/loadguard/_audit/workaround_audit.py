"""The ``after_load`` workarounds, decided by an audit: a workaround whose targets the model already holds right is
stale and skipped, one that fixes nothing is an error, and the model is audited again after one applied."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..errors import WorkaroundError
from ..report import WorkaroundStatus
from ..workarounds import Workaround, WorkaroundOutcome, config_of, model_label, stale, targets_of
from .auditing import audit


def after_load(
    model: Any, items: Sequence[Workaround], report: Any = None, *, strict: bool = False
) -> list[WorkaroundOutcome]:
    """Run the ``after_load`` workarounds on ``model``: stale ones are skipped, ones that fix nothing raise.

    ``report`` is the audit of the model as loaded (computed here when not given).
    """
    outcomes = []
    config = config_of(model)
    for item in (w for w in items if w.stage == "after_load"):
        targets = targets_of(item, model, config)
        report = report if report is not None else audit(model)
        broken = sorted({f.tensor for f in report.failures} & set(targets))
        if not broken:
            outcomes.append(stale(item, f"preserves {', '.join(targets)}", strict))
            continue
        fixed = int(item.fn(model))
        if fixed == 0:
            raise WorkaroundError(
                f"workaround {item.name} applied to {model_label(config)} and fixed nothing (its targets {', '.join(broken)} are broken)",
                "the model's code changed under the workaround: update or remove it",
            )
        outcomes.append(
            WorkaroundOutcome(
                item.name, item.stage, WorkaroundStatus.APPLIED, fixed, f"fixed {', '.join(broken)}", item.upstream
            )
        )
        report = None  # the model changed: a later workaround audits it again
    return outcomes


def audit_after_load(
    model: Any,
    items: Sequence[Workaround],
    checkpoint: Any = None,
    *,
    early: Sequence[WorkaroundOutcome] = (),
    strict: bool = False,
):
    """Audit ``model`` as loaded, run the ``after_load`` workarounds, and audit again if any applied.

    Returns ``(as_loaded, after)``: both reports carry every outcome (``early`` ones from ``before_import``
    first); ``after`` is None when no workaround changed the model.
    """
    as_loaded = audit(model, checkpoint)
    outcomes = tuple(early) + tuple(after_load(model, items, as_loaded, strict=strict))
    after = (
        audit(model, checkpoint)
        if any(o.status == WorkaroundStatus.APPLIED and o.stage == "after_load" for o in outcomes)
        else None
    )
    as_loaded = dataclasses.replace(as_loaded, workarounds=outcomes)
    return as_loaded, (dataclasses.replace(after, workarounds=outcomes) if after is not None else None)


__all__ = ["after_load", "audit_after_load"]
