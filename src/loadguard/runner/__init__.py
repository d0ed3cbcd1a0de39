"""The reference harness: an audited Hugging Face runner, the differential compare, the NaN trace, and where a run
crashed."""

from .cases import BUILT_IN_PROMPTS, default_cases
from .crash import explain, guarded
from .differential import eager_load
from .hf_runner import HfRunner, load_processing
from .runs import REBUILT, check_run, rebuilt
from .trace import TraceResult, trace

__all__ = [
    "BUILT_IN_PROMPTS",
    "REBUILT",
    "HfRunner",
    "TraceResult",
    "check_run",
    "default_cases",
    "eager_load",
    "explain",
    "guarded",
    "load_processing",
    "rebuilt",
    "trace",
]
