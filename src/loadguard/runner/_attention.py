"""Running a model's own code, and telling what happened when it fails because of the attention kernel it got."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .._infra import procs
from ..errors import EagerAttentionNeededError, LoadguardError


def run_model(model: Any, call: Callable[[], Any], name: str) -> Any:
    """``call()``, the model's own ``generate`` or forward. When it fails in the model's code under an attention
    kernel other than eager, the same call is tried once with eager attention: code written for eager only (it
    indexes attention weights that SDPA does not return) fails with an opaque error, and the user is told what
    happened and what to pass (:class:`EagerAttentionNeededError`), never guessed at. The kernel is put back."""
    try:
        with procs.exits_refused(f"running {name}"):  # its exit is an error; its chdir and signal handlers undone
            return call()
    except LoadguardError:
        raise
    except Exception as error:
        current = getattr(getattr(model, "config", None), "_attn_implementation", None)
        if current in (None, "eager") or not hasattr(model, "set_attn_implementation"):
            raise
        try:
            model.set_attn_implementation("eager")
            with procs.exits_refused(f"running {name}"):
                call()
        except Exception:
            raise error from None  # eager fails too: not an attention-kernel matter
        finally:
            with contextlib.suppress(Exception):
                model.set_attn_implementation(current)
        raise EagerAttentionNeededError(
            f"{name}'s code fails under attn_implementation={current!r} ({type(error).__name__}: {error}) "
            "and runs with attn_implementation='eager'"
        ) from error


__all__ = ["run_model"]
