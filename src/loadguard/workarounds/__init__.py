"""Workarounds that prove they are needed, fail loudly when they stop applying, and say when to go.

A workaround is registered with :func:`workaround` and runs at one stage of a load:

- ``before_import``: a context manager active around the whole ``from_pretrained`` (importing the remote
  code, constructing, loading) and around every later construction of the model's class (its reference,
  its eager twin, a scan). Called as ``fn(path, config_dict)``; it yields a :class:`Usage` and counts
  what it actually fixed. Counted nothing -> ``stale``. It declares the failures it fixes (``fixes=``:
  exception type and message pattern), so that an error a user hits names the workaround that fixes it,
  and ``workarounds="auto"`` can apply it and retry.
- ``after_load``: ``fn(model) -> int`` (how many things it fixed). Before it runs, the tensors it targets
  (``targets(model)``) are audited: if they are already correct it is skipped as ``stale`` (a strict mode
  raises instead, like pytest's strict xfail). If it runs and fixes nothing, that is an error.
- ``runner``: ``fn(runner) -> runner``, applied to an :class:`loadguard.runner.HfRunner` after loading;
  ``needed(runner) -> bool`` says whether it still is.

Every application, skip and staleness becomes a :class:`WorkaroundOutcome` in the audit report's JSON
and on the runner.

Workarounds come from loadguard itself, from installed packages (entry-point group
``loadguard.workarounds``: importing the named module registers them) and from files
(:func:`load_file`, the CLI's ``--workarounds-from FILE.py``); each remembers where it came from.

The generic :func:`loadguard.repair` is the default fix for broken tensors; a named workaround is for
when you want the model's own recompute path, or need a fix before import. Example::

    model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True,
                           workarounds=["minicpmv-pos-cache"], strict_stale=True)
    [w.to_dict() for w in model.loadguard_report.workarounds]
"""

from __future__ import annotations

from ._apply import (
    attempt,
    before_import,
    check_applies,
    config_of,
    construction,
    for_runner,
    forget_remote_code,
    judge_before_import,
    model_label,
    predict_after_load,
    remember,
    stale,
    targets_of,
    using,
)
from ._external import load_file
from ._registry import (
    AUTO,
    BUILT_IN,
    CONSTRUCTION_ATTRIBUTE,
    ENTRY_POINT_GROUP,
    REGISTRY,
    STAGES,
    Signature,
    Usage,
    Workaround,
    WorkaroundOutcome,
    activate,
    all_workarounds,
    compile_signatures,
    decides_on_memory,
    external_errors,
    fixes_for,
    get,
    matching,
    model_code,
    names_of,
    registering_from,
    resolve,
    wants_auto,
    workaround,
)

with registering_from(BUILT_IN):  # the built-ins depend on the registry only; registered before any lookup
    from . import (  # noqa: F401
        lazy_packages,
        minicpmv,
        remote_code,
        transformers_v4,
        v4_api,
        v4_auto,
        v4_behaviour,
        v4_config_cache,
        v4_generate,
        v4_names,
        v4_onnx,
        v4_runtime,
        v4_star,
    )
from .v4_runtime import PAST_THE_LOAD

__all__ = [
    "AUTO",
    "PAST_THE_LOAD",
    "BUILT_IN",
    "CONSTRUCTION_ATTRIBUTE",
    "ENTRY_POINT_GROUP",
    "REGISTRY",
    "STAGES",
    "Signature",
    "Usage",
    "Workaround",
    "WorkaroundOutcome",
    "activate",
    "all_workarounds",
    "attempt",
    "before_import",
    "check_applies",
    "compile_signatures",
    "config_of",
    "construction",
    "decides_on_memory",
    "external_errors",
    "fixes_for",
    "for_runner",
    "forget_remote_code",
    "get",
    "judge_before_import",
    "load_file",
    "matching",
    "model_code",
    "model_label",
    "names_of",
    "predict_after_load",
    "remember",
    "resolve",
    "stale",
    "targets_of",
    "using",
    "wants_auto",
    "workaround",
]
