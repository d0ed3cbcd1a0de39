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

import importlib
from typing import TYPE_CHECKING

# Public names -> the room (or module) that offers them. Imported on first use, so `import loadguard` (and the pytest
# plugin, which every pytest run in an environment with loadguard loads) costs no torch import.
_EXPORTS = {
    "audit": "_audit",
    "fix": "_fix",
    "FixResult": "_fix",
    "BrokenModelError": "errors",
    "LoadguardError": "errors",
    "LoadguardWarning": "errors",
    "load": "_audit",
    "poison": "_hf",
    "repair": "_audit",
    "scan": "_scan",
    "scan_many": "_scan",
    "matrix": "_matrix",
    "Row": "formats",
    "TraceResult": "runner",
    "trace": "runner",
    "WorkaroundOutcome": "workarounds",
    "workaround": "workarounds",
    "AuditReport": "report",
    "CheckSummary": "report",
    "Finding": "report",
    "RepairResult": "report",
    "Unrepaired": "report",
}
# the public modules, reachable as attributes of the package once it is imported
_SUBMODULES = ("compare", "errors", "executors", "formats", "report", "runner", "workarounds", "zoo")

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


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


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
