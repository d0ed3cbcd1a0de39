"""loadguard: prove a model came out of loading exactly as its checkpoint and its code define it.

Detect, explain, repair, prove::

    import loadguard
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
    report = loadguard.audit(model)            # which tensors are wrong, and how
    if not report.ok:
        result = loadguard.repair(model, report)   # fix them in memory, then re-audit
        assert result.ok

    # or all at once, loading under deterministic poison:
    model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True, poison=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._infra import lazy_face as _lazy_face

# The public names, by the room (or module) that offers them, and the public modules (attributes of the package).
# Each is imported on first use, so `import loadguard` (and the pytest plugin, which every pytest run in an
# environment with loadguard loads) costs no torch import.
__getattr__, __dir__ = _lazy_face(
    __name__,
    {
        "_audit": ("audit", "load", "repair"),
        "_fix": ("FixResult", "fix"),
        "_hf": ("poison",),
        "_matrix": ("matrix",),
        "_scan": ("scan", "scan_many"),
        "errors": ("BrokenModelError", "LoadguardError", "LoadguardWarning"),
        "formats": ("Row",),
        "report": ("AuditReport", "CheckSummary", "Finding", "RepairResult", "Unrepaired"),
        "runner": ("TraceResult", "trace"),
        "workarounds": ("WorkaroundOutcome", "workaround"),
    },
    modules=("compare", "errors", "executors", "formats", "report", "runner", "workarounds", "zoo"),
)[:2]

if TYPE_CHECKING:
    from ._audit import audit, load, repair
    from ._fix import FixResult, fix
    from ._hf import poison
    from ._matrix import matrix
    from ._scan import scan, scan_many
    from .errors import BrokenModelError, LoadguardError, LoadguardWarning
    from .formats import Row
    from .report import AuditReport, CheckSummary, Finding, RepairResult, Unrepaired
    from .runner import TraceResult, trace
    from .workarounds import WorkaroundOutcome, workaround


__all__ = [
    "AuditReport",
    "BrokenModelError",
    "CheckSummary",
    "Finding",
    "FixResult",
    "LoadguardError",
    "LoadguardWarning",
    "RepairResult",
    "Row",
    "TraceResult",
    "WorkaroundOutcome",
    "Unrepaired",
    "audit",
    "fix",
    "load",
    "poison",
    "repair",
    "scan",
    "matrix",
    "scan_many",
    "trace",
    "workaround",
]
__version__ = "0.1.0"
