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

import importlib
from typing import TYPE_CHECKING

from ._registry import __all__ as _REGISTRY_NAMES

# The registry is imported eagerly (light: it imports nothing of loadguard but errors); the application, which
# sits above the audit, only when one of its names is first used, so importing the registry never imports the audit.
APPLY_NAMES = (
    "after_load",
    "attempt",
    "audit_after_load",
    "before_import",
    "construction",
    "for_runner",
    "judge_before_import",
    "predict_after_load",
    "remember",
    "using",
)

from ._registry import *  # noqa: E402,F403  (the public registry API, re-exported)
from ._registry import BUILT_IN, REGISTRY, _registering_from  # noqa: E402,F401
from ._external import load_file  # noqa: E402,F401

with _registering_from(BUILT_IN):  # the built-ins depend on the registry only; registered before any lookup
    from . import minicpmv, remote_code, transformers_v4, v4_api, v4_auto, v4_behaviour, v4_names  # noqa: E402,F401

if TYPE_CHECKING:
    from ._apply import (  # noqa: F401
        after_load,
        attempt,
        audit_after_load,
        before_import,
        construction,
        for_runner,
        judge_before_import,
        predict_after_load,
        remember,
        using,
    )


def __getattr__(name: str):
    if name in APPLY_NAMES:
        value = getattr(importlib.import_module("._apply", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(set(_REGISTRY_NAMES) | set(APPLY_NAMES) | {"load_file"})
