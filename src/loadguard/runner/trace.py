"""``trace``: find the first module whose output goes NaN/Inf, and what in it was already broken."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._infra import procs


@dataclass(frozen=True)
class TraceResult:
    """Where the first non-finite value appeared during one forward pass.

    ``module`` is the first module (in the order modules finish) whose output holds NaN/Inf;
    ``inputs`` the arguments of that module that were already non-finite; ``tensors`` the parameters
    and buffers, of that module or of the modules enclosing it, that hold NaN/Inf — the likely origin.
    ``module`` is None when the whole forward stayed finite.
    """

    module: str | None
    module_class: str | None = None
    inputs: tuple[str, ...] = ()
    tensors: tuple[str, ...] = ()
    modules_run: int = 0
    path: tuple[str, ...] = field(default=())

    @property
    def finite(self) -> bool:
        return self.module is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "finite": self.finite,
            "module": self.module,
            "module_class": self.module_class,
            "non_finite_inputs": list(self.inputs),
            "non_finite_tensors": list(self.tensors),
            "modules_run": self.modules_run,
        }

    def describe(self) -> str:
        if self.finite:
            return f"the forward pass stayed finite through {self.modules_run} module calls"
        lines = [f"first non-finite output: {self.module} ({self.module_class})"]
        if self.inputs:
            lines.append(f"  already non-finite when it ran: {', '.join(self.inputs)}")
        if self.tensors:
            lines.append(f"  non-finite tensors in it or around it: {', '.join(self.tensors)}")
        return "\n".join(lines)


def _non_finite(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and value.numel() > 0 and not bool(torch.isfinite(value).all())
    if isinstance(value, Mapping):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    return False


def _own_non_finite(module: nn.Module, prefix: str) -> list[str]:
    named = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
    return [
        f"{prefix}.{n}" if prefix else n
        for n, t in named
        if t is not None and t.device.type != "meta" and _non_finite(t)
    ]


def trace(
    model: nn.Module, inputs: Mapping[str, Any] | None = None, *, run: Callable[[], Any] | None = None
) -> TraceResult:
    """Run ``model(**inputs)`` (or ``run()``: e.g. one greedy step through a runner, for models whose
    forward takes its inputs some other way) once with hooks on every module and report where NaN/Inf
    first appears.

    Example::

        result = loadguard.trace(model, processor(text=prompt, images=[image]))
        result = loadguard.trace(runner.model, run=lambda: runner.generate_greedy([prompt], 1, images=[[image]]))
        print(result.describe())   # first non-finite output: resampler.attn ... resampler.pos_embed
    """
    if (inputs is None) == (run is None):
        raise TypeError("trace() takes inputs or run=, one of them")
    names = {module: name for name, module in model.named_modules()}
    state: dict[str, Any] = {"first": None, "count": 0, "inputs": {}}
    handles = []

    def before(module, args, kwargs):
        bad = [f"arg {i}" for i, a in enumerate(args) if _non_finite(a)]
        bad += [k for k, v in kwargs.items() if _non_finite(v)]
        state["inputs"][id(module)] = bad

    def after(module, args, kwargs, output):
        state["count"] += 1
        if state["first"] is None and _non_finite(output):
            state["first"] = (module, state["inputs"].get(id(module), []))

    for module in names:
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        with torch.no_grad(), procs.exits_refused(f"running {type(model).__name__}"):
            if run is not None:
                run()
            else:
                model(**{k: v for k, v in inputs.items() if k != "image_sizes"})
    finally:
        for handle in handles:
            handle.remove()
    if state["first"] is None:
        return TraceResult(None, modules_run=state["count"])
    module, bad_inputs = state["first"]
    name = names[module]
    # the module itself, then the modules that enclose it: a broken buffer often sits one level up
    parts = name.split(".") if name else []
    enclosing = [".".join(parts[:i]) for i in range(len(parts), -1, -1)]
    tensors: list[str] = []
    for owner in enclosing:
        tensors += _own_non_finite(model.get_submodule(owner), owner)
        if tensors:
            break
    return TraceResult(
        module=name or "(model)",
        module_class=type(module).__name__,
        inputs=tuple(bad_inputs),
        tensors=tuple(tensors),
        modules_run=state["count"],
        path=tuple(enclosing),
    )
