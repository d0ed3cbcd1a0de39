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
import sys
import types
from typing import TYPE_CHECKING

# Public names -> the module that defines them. Imported on first use, so `import loadguard` (and the
# pytest plugin, which every pytest run in an environment with loadguard loads) costs no torch import.
_EXPORTS = {
    "audit": "audit",
    "fix": "fix",
    "FixResult": "fix",
    "BrokenModelError": "errors",
    "LoadguardError": "errors",
    "LoadguardWarning": "errors",
    "load": "load",
    "poison": "poison",
    "repair": "repair",
    "scan": "scan",
    "scan_many": "fleet",
    "matrix": "matrix",
    "Row": "formats",
    "TraceResult": "runner.trace",
    "trace": "runner.trace",
    "WorkaroundOutcome": "workarounds",
    "workaround": "workarounds",
    "AuditReport": "report",
    "CheckSummary": "report",
    "Finding": "report",
    "RepairResult": "report",
    "Unrepaired": "report",
}
_SUBMODULES = ("checks", "checkpoint", "compare", "envs", "errors", "formats", "inventory", "reference", "report", "runner", "workarounds", "zoo")
# ("scan" is a verb: loadguard.scan is the function, as loadguard.audit is; so is loadguard.matrix)

if TYPE_CHECKING:
    from .audit import audit
    from .fix import FixResult, fix
    from .errors import BrokenModelError, LoadguardError
    from .errors import LoadguardWarning
    from .load import load
    from .poison import poison
    from .repair import repair
    from .scan import scan
    from .fleet import scan_many
    from .matrix import matrix
    from .formats import Row
    from .report import AuditReport, CheckSummary, Finding, RepairResult, Unrepaired
    from .runner.trace import TraceResult, trace
    from .workarounds import WorkaroundOutcome, workaround


class _Package(types.ModuleType):
    """Keeps ``loadguard.audit`` (and load, poison, repair) the public function even after the submodule of
    the same name is first imported, when the import system would bind the submodule in its place."""

    def __setattr__(self, name: str, value) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
