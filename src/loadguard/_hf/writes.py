"""Observing what code does to a model's tensors: in-place writes into (and replacements of) watched storages,
recorded with the line of model code that made them, and, for a replay on a live model, held back.

Used by the scan (weight initialization on a weightless load) and by :mod:`loadguard._hf.replay` (transformers' init
pass replayed on a loaded model)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._infra import located


def storage_of(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


@dataclass
class InitWrites:
    """What ``_initialize_missing_keys`` did to tensors already loaded: ops written into each, and the names
    whose tensor it replaced with another."""

    writes: dict[str, list[str]] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)
    ran: bool = False
    where: dict[str, str] = field(default_factory=dict)
    """For each written name, the line of model code that wrote it first (``modeling_zaya.py:671``)."""

    def note(self, name: str, op: str) -> None:
        self.writes.setdefault(name, []).append(op)
        if name not in self.where:
            location = _model_code_line()
            if location:
                self.where[name] = location


def _model_code_line() -> str:
    """The innermost frame of model code (a transformers model module, or remote code) on the current stack."""

    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if "/transformers/models/" in filename or "transformers_modules" in filename:
            return f"{located(filename, frame.f_lineno)} ({frame.f_code.co_name})"
        frame = frame.f_back
    return ""


class CannotHoldBack(RuntimeError):
    """A write to a held-back tensor by an op whose result cannot be given without running it."""


class WriteRecorder(TorchDispatchMode):
    """Records in-place writes (and ``out=`` writes) to watched storages. ``held``: storages whose writes are recorded
    and not carried out (a replay of model code on a live model: the op returns the tensor it would have written)."""

    def __init__(
        self, watched: dict[int, list[str]], record: InitWrites, held: frozenset[int] | set[int] = frozenset()
    ):
        super().__init__()
        self.watched, self.record, self.held = watched, record, held

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kept: list[torch.Tensor] = []
        for index, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[index] if index < len(args) else kwargs.get(argument.name)
            if isinstance(value, torch.Tensor):
                storage = storage_of(value)
                for name in self.watched.get(storage, ()):
                    self.record.note(name, func._schema.name.split("::")[-1])
                if storage in self.held:
                    kept.append(value)
        if not kept:
            return func(*args, **kwargs)
        returns = func._schema.returns
        if not returns:
            return None
        if (
            len(returns) == 1
            and len(kept) == 1
            and returns[0].alias_info is not None
            and returns[0].alias_info.is_write
        ):
            return kept[0]  # an in-place op returns the tensor it wrote: as if done, nothing changed
        raise CannotHoldBack(
            f"{func._schema.name} writes into the model's tensors and returns more than the tensor it writes"
        )


__all__ = ["CannotHoldBack", "InitWrites"]
