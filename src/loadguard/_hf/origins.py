"""Where each tensor of a model comes from in code: the line that registered a buffer, assigned a parameter or a plain
tensor attribute, recorded while the model is constructed (not found by reading the source).

For a parameter made inside a torch layer (``nn.Linear``'s ``weight``) the line is the model's own that built the
layer (``self.q_proj = nn.Linear(...)``): frames in torch, accelerate and loadguard are passed over.

Example::

    origins: dict = {}
    with recording(origins):
        model = model_class(config)
    named(model, origins)   # {"positions.index": "modeling_lgtoy.py:30", "layers.0.q_proj.weight": ...}
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch
from torch import nn

from .._infra import located

_PASSED_OVER = tuple(
    os.path.dirname(module.__file__) + os.sep
    for module in (torch, sys.modules.get("accelerate"), sys.modules[__name__.split(".")[0]], contextlib)
    if module is not None and getattr(module, "__file__", None)
)


def _call_site() -> tuple[str, int] | None:
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PASSED_OVER) and filename != contextlib.__file__:
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


@contextlib.contextmanager
def recording(origins: dict[tuple[int, str], tuple[str, int]]) -> Iterator[None]:
    """Record ``(id(module), attribute) -> (file, line)`` for every tensor a module registers or assigns in the block
    (the last write wins: a buffer recomputed later in ``__init__`` is located where its value was made)."""
    set_attribute, register_buffer = nn.Module.__setattr__, nn.Module.register_buffer

    def recorded_setattr(self, name, value):
        if isinstance(value, torch.Tensor):
            site = _call_site()
            if site is not None:
                origins[(id(self), name)] = site
        return set_attribute(self, name, value)

    def recorded_register_buffer(self, name, tensor, persistent=True):
        site = _call_site()
        if site is not None:
            origins[(id(self), name)] = site
        return register_buffer(self, name, tensor, persistent)

    nn.Module.__setattr__ = recorded_setattr
    nn.Module.register_buffer = recorded_register_buffer
    try:
        yield
    finally:
        nn.Module.__setattr__ = set_attribute
        nn.Module.register_buffer = register_buffer


def named(model: nn.Module, origins: dict[tuple[int, str], tuple[str, int]]) -> dict[str, str]:
    """``origins`` by the dotted names ``model`` gives its tensors (every alias), each as ``file:line``
    (:func:`loadguard._infra.locations.located`)."""
    by_module: dict[int, list[tuple[str, tuple[str, int]]]] = {}
    for (owner, attribute), site in origins.items():
        by_module.setdefault(owner, []).append((attribute, site))
    out: dict[str, str] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for attribute, (filename, line) in by_module.get(id(module), ()):
            out.setdefault(f"{prefix}.{attribute}" if prefix else attribute, located(filename, line))
    return out


__all__ = ["named", "recording"]
