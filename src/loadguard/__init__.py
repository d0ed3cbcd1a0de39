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

from .audit import audit
from .errors import BrokenModelError, LoadguardError
from .load import LoadguardWarning, load
from .poison import poison
from .repair import repair
from .runner.trace import TraceResult, trace
from .workarounds import WorkaroundOutcome, workaround
from .report import AuditReport, CheckSummary, Finding, RepairResult, Unrepaired

__all__ = [
    "AuditReport",
    "BrokenModelError",
    "CheckSummary",
    "Finding",
    "LoadguardError",
    "LoadguardWarning",
    "RepairResult",
    "TraceResult",
    "WorkaroundOutcome",
    "Unrepaired",
    "audit",
    "load",
    "poison",
    "repair",
    "trace",
    "workaround",
]
__version__ = "0.1.0"
