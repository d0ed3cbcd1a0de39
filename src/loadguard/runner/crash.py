"""When the loaded model's own code raises: which module raised, on which line, and what the load left wrong there.

A model whose index buffer holds INT_MAX or whose rotary table is still on meta does not return garbage, it raises
(``IndexError``, ``Cannot copy out of meta tensor``). That is the load's failure, not the user's, once the reference
(built eagerly, every tensor as its code and checkpoint define it) runs the same call: :func:`explain` says so with
the tensors the audit finds wrong nearest the module that raised.

Example::

    outputs, crash = guarded(model, lambda: runner.generate_greedy(prompts, 8))
    if crash is not None:
        broken = explain(model, path, crash)
        print(broken.describe())   # IndexError in positions (LgPositions) at modeling_lgtoy.py:52 ... positions.index
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from .. import workarounds as registry
from .._audit import audit
from .._infra import located
from ..errors import LoadguardError
from ..report import Finding


@dataclass(frozen=True)
class Crash:
    """An exception the model's code raised: its type and message, the innermost module of the model whose code was
    running (``module`` is ``""`` for the model itself, None when no module of it was on the stack) and the line."""

    exception: str
    message: str
    module: str | None
    module_class: str | None
    location: str | None
    fixes: tuple[str, ...] = ()
    """The registered workarounds that declare this failure (code written for another transformers)."""

    @property
    def where(self) -> str:
        """``IndexError in positions (LgToyPositions) at modeling_lgtoy.py:41``."""
        where = self.exception
        if self.module is not None:
            where += f" in {self.module or '(model)'} ({self.module_class})"
        if self.location:
            where += f" at {self.location}"
        return where

    def describe(self) -> str:
        first = self.message.splitlines()[0] if self.message else ""
        return f"{self.where}: {first}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "exception": self.exception,
            "message": self.message,
            "module": self.module,
            "module_class": self.module_class,
            "location": self.location,
            "fixes": list(self.fixes),
        }


def locate(model: nn.Module, error: BaseException) -> Crash:
    """The innermost frame of ``error``'s traceback that runs a method of one of ``model``'s modules (torch's own
    ``nn.Module`` machinery, as the ``__getattr__`` that raises for a missing attribute, is not the model's line)."""
    names = {id(module): (name, module) for name, module in model.named_modules()}
    module_name = module_class = location = None
    frame_tb = error.__traceback__
    while frame_tb is not None:
        frame = frame_tb.tb_frame
        owner = frame.f_locals.get("self")
        in_torch = "/torch/" in frame.f_code.co_filename.replace("\\", "/")
        if owner is not None and id(owner) in names and names[id(owner)][1] is owner and not (in_torch and location):
            module_name = names[id(owner)][0]
            module_class = type(owner).__name__
            location = located(frame.f_code.co_filename, frame_tb.tb_lineno)
        frame_tb = frame_tb.tb_next
    return Crash(
        type(error).__name__, str(error), module_name, module_class, location, tuple(registry.fixes_for(error))
    )


def guarded(model: nn.Module, call: Callable[[], Any]) -> tuple[Any, Crash | None]:
    """``(call(), None)``, or ``(None, crash)`` when the model's code raised. loadguard's own errors (a runner
    inconsistency, a model that needs eager attention) are not the model crashing and propagate."""
    try:
        return call(), None
    except LoadguardError:
        raise
    except Exception as error:
        return None, locate(model, error)


@dataclass(frozen=True)
class BrokenRun:
    """What the load broke, shown by a crash the reference does not have: the crash, and the tensors the audit found
    wrong in the module that raised (``scope`` ``"in"``), in a module enclosing it (``"around"``), or, when none is
    there, anywhere in the model (``"elsewhere"``; empty when the audit found nothing)."""

    crash: Crash
    tensors: tuple[Finding, ...]
    scope: str

    def describe(self) -> str:
        lines = [
            f"the loaded model raised {self.crash.describe()}",
            "  the reference (built eagerly from code + checkpoint) runs the same call",
        ]
        if self.tensors:
            lines.append(f"  the load left these wrong {place(self.crash.module, self.scope)}:")
            lines += [f"    {f.tensor} ({f.status}): {f.detail}" for f in self.tensors]
        else:
            lines.append(
                "  the audit found no wrong tensor: the difference is in code the load ran (workarounds, hooks)"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "crash": self.crash.to_dict(),
            "reference": "runs",
            "scope": self.scope,
            "tensors": [f.to_dict() for f in self.tensors],
        }


def place(module: str | None, scope: str) -> str:
    """Where :func:`nearest` found its tensors, in words: ``in positions``, ``around layers.0.attn``, ``elsewhere in the
    model``."""
    owner = module or "(model)"
    return {"in": f"in {owner}", "around": f"around {owner}"}.get(scope, "elsewhere in the model")


def nearest(findings: tuple[Finding, ...], module: str | None) -> tuple[tuple[Finding, ...], str]:
    """The failing findings in ``module`` (or below it), else in the nearest module enclosing it, else all of them."""
    failing = tuple(f for f in findings if f.failing)
    if module is None:
        return failing, "elsewhere"
    parts = module.split(".") if module else []
    for depth in range(len(parts), -1, -1):
        owner = ".".join(parts[:depth])
        inside = tuple(f for f in failing if not owner or f.tensor.startswith(owner + "."))
        if inside and (depth == len(parts) or owner):
            return inside, "in" if depth == len(parts) else "around"
    return failing, "elsewhere"


def explain(model: nn.Module, checkpoint: Any, crash: Crash) -> BrokenRun:
    """Audit ``model`` against ``checkpoint`` and name the wrong tensors nearest the module that raised."""

    report = audit(model, checkpoint)
    tensors, scope = nearest(report.findings, crash.module)
    return BrokenRun(crash, tensors, scope)


def crash_note(model, error: BaseException) -> str:
    """``loadguard: IndexError in positions (P) at modeling_x.py:41; the load left wrong in positions: positions.index
    (uninitialized)``; never raises (a note must not replace the model's own error)."""

    try:
        crash = locate(model, error)
        wrong, scope = nearest(audit(model).findings, crash.module)
    except Exception:  # noqa: BLE001 - the model's error is what the user must see
        return ""
    if not wrong:
        return f"loadguard: {crash.where}; the audit finds no tensor of the model wrong"
    listed = ", ".join(f"{f.tensor} ({f.status})" for f in wrong[:8]) + (
        f" and {len(wrong) - 8} more" if len(wrong) > 8 else ""
    )
    return f"loadguard: {crash.where}; the load left these wrong {place(crash.module, scope)}: {listed} (runner.audit() has the details)"


__all__ = ["BrokenRun", "crash_note", "Crash", "explain", "guarded", "locate", "nearest", "place"]
