"""Replaying a model's own code on the live model with every write to its tensors held back: what weight
initialization (or a transformers-4 ``_tie_weights``) *does* to a tensor, observed rather than taken from a report.

transformers' loading info calls every key the checkpoint lacks "newly initialized"; whether anything initializes it
depends on the model's ``_init_weights``, which may have no branch for it (5.25's ``CLIPModel.logit_scale``). A replay
runs the installed transformers' own per-module initialization (``_initialize_weights``, with its guards, on the
modules from the root down to the tensor's owner, each with the ``_init_weights`` of its nearest enclosing
``PreTrainedModel``, as ``initialize_weights`` dispatches it) under a dispatch mode that records writes into the
model's storages and carries none of them out. Module attributes (a replaced parameter, a ``.data`` swap, the
``_is_hf_initialized`` flags) are put back and the RNG state is restored: the model is the same object, with the same
values, afterwards.
"""

from __future__ import annotations

import contextlib
import inspect
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from .writes import CannotHoldBack, InitWrites, WriteRecorder, storage_of


@dataclass(frozen=True)
class Replay:
    """What a replay saw. ``written``: name -> the line of model code that wrote it first (``""`` where no frame of
    model code was on the stack); ``replaced``: names whose tensor the code swapped for another; ``error``: why the
    replay could not finish (then what it saw before is incomplete); ``asked``: the names it watched."""

    written: dict[str, str] = field(default_factory=dict)
    replaced: frozenset[str] = frozenset()
    ran: tuple[str, ...] = ()
    error: str | None = None
    asked: frozenset[str] = frozenset()
    """The names the replay watched: it says nothing of any other tensor."""

    def covers(self, name: str) -> bool:
        return name in self.asked

    def wrote(self, name: str) -> bool:
        return name in self.written or name in self.replaced


def _tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [
        (f"{prefix}.{name}" if prefix else name, tensor)
        for prefix, module in model.named_modules(remove_duplicate=False)
        for table in (module._parameters, module._buffers)
        for name, tensor in table.items()
        if tensor is not None
    ]


@contextlib.contextmanager
def _held_back(model: nn.Module, watched_names: Iterable[str], record: InitWrites) -> Iterator[set[str]]:
    """Everything the body does to ``model``'s tensors and module attributes is recorded (writes to
    ``watched_names``), then undone or never done. Yields the set that collects replaced names on exit."""
    watched_names = set(watched_names)
    tensors = _tensors(model)
    held = {s for _, t in tensors if (s := storage_of(t)) is not None}
    watched: dict[int, list[str]] = {}
    for name, tensor in tensors:
        if name in watched_names:
            watched.setdefault(storage_of(tensor), []).append(name)
    prefixes: dict[int, tuple[str, nn.Module]] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        prefixes.setdefault(id(module), (prefix, module))
    saved_attributes = [
        (
            prefix,
            m,
            dict(vars(m)),
            dict(m._parameters),
            dict(m._buffers),
            dict(m._modules),
            set(getattr(m, "_non_persistent_buffers_set", ())),
        )
        for prefix, m in prefixes.values()
    ]
    saved_data = [(name, t, t.data, storage_of(t)) for name, t in tensors]
    devices = sorted({t.device.index or 0 for _, t in tensors if t.device.type == "cuda"})
    python_random = random.getstate()
    replaced: set[str] = set()
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad(), WriteRecorder(watched, record, frozenset(held)):
            yield replaced
    finally:
        random.setstate(python_random)
        for name, tensor, data, storage in saved_data:
            if storage_of(tensor) != storage:  # `.data = ...`: a replacement, put back
                if name in watched_names:
                    replaced.add(name)
                tensor.data = data
        for prefix, module, attributes, parameters, buffers, children, non_persistent in saved_attributes:
            for table, before in ((module._parameters, parameters), (module._buffers, buffers)):
                for attribute, tensor in table.items():
                    full = f"{prefix}.{attribute}" if prefix else attribute
                    if full in watched_names and before.get(attribute) is not tensor:
                        replaced.add(full)
            vars(module).clear()
            vars(module).update(attributes)
            for table, before in (
                (module._parameters, parameters),
                (module._buffers, buffers),
                (module._modules, children),
            ):
                table.clear()
                table.update(before)
            if hasattr(module, "_non_persistent_buffers_set"):
                module._non_persistent_buffers_set.clear()
                module._non_persistent_buffers_set.update(non_persistent)


def _guarded() -> contextlib.AbstractContextManager:
    """transformers' guard around its init pass (``torch.nn.init`` skips tensors flagged as loaded), where it has one."""
    try:
        from transformers.initialization import guard_torch_init_functions
    except ImportError:  # 4.x: no guard, as its init pass had none
        return contextlib.nullcontext()
    return guard_torch_init_functions()


def _initializers(model: nn.Module, owners: set[str]) -> list[tuple[str, nn.Module, Callable[[nn.Module], None]]]:
    """(name, module, how transformers' init pass initializes it) for every module on the way from the root to each
    of ``owners``, children before parents as ``smart_apply`` goes: each module by the ``_initialize_weights`` of its
    nearest enclosing ``PreTrainedModel`` (itself, if it is one)."""
    from transformers import PreTrainedModel

    wanted: set[str] = set()
    for owner in owners:
        parts = owner.split(".") if owner else []
        wanted |= {".".join(parts[:i]) for i in range(len(parts) + 1)}
    root = model if isinstance(model, PreTrainedModel) else None
    custom = False
    if root is not None and callable(getattr(type(root), "is_custom_code", None)):
        try:
            custom = bool(root.is_custom_code())
        except Exception:  # the model's own code: whatever it raises, the guard it feeds stays off
            custom = False
    out = []
    enclosing: dict[str, PreTrainedModel | None] = {"": root}
    for name, module in model.named_modules():
        parent = enclosing.get(name.rsplit(".", 1)[0] if "." in name else "", root)
        owner = module if isinstance(module, PreTrainedModel) else parent
        enclosing[name] = owner
        if name in wanted and owner is not None:
            out.append((name, module, _initialize_one(owner, custom)))
    return sorted(out, key=lambda item: -item[0].count(".") if item[0] else 1)


def _initialize_one(owner, custom: bool) -> Callable[[nn.Module], None]:
    method = owner._initialize_weights
    takes_custom = "is_custom_code" in inspect.signature(method).parameters

    def initialize(module: nn.Module) -> None:
        module._is_hf_initialized = False  # the load set it; the replay asks what the pass did before that
        if takes_custom:
            method(module, is_custom_code=custom)
        else:
            method(module)

    return initialize


def initialization(model: nn.Module, names: Iterable[str]) -> Replay:
    """Replay transformers' weight initialization for the modules that own ``names`` (and their ancestors), with
    every write held back: which of ``names`` it writes, and where.

    Example::

        replay = initialization(model, ["logit_scale"])
        replay.wrote("logit_scale")      # False on transformers 5.25's CLIPModel: nothing initializes it
    """
    names = list(dict.fromkeys(names))
    if not names:
        return Replay()
    owners = {name.rsplit(".", 1)[0] if "." in name else "" for name in names}
    record = InitWrites()
    ran: list[str] = []
    error = None
    replaced: set[str] = set()
    try:
        with _guarded(), _held_back(model, names, record) as replaced:
            for module_name, module, initialize in _initializers(model, owners):
                initialize(module)
                ran.append(module_name or type(model).__name__)
    except CannotHoldBack as failure:
        error = str(failure)
    except Exception as failure:  # the model's own code: whatever it raises, the replay is incomplete and says so
        error = f"{type(failure).__name__}: {failure}"
    return Replay(
        {name: record.where.get(name, "") for name in record.writes},
        frozenset(replaced),
        tuple(ran),
        error,
        frozenset(names),
    )


def _defines(module: nn.Module, name: str) -> bool:
    return any(name in vars(klass) for klass in type(module).__mro__)


def v4_ties(model: nn.Module) -> dict[str, str] | None:
    """The ties transformers 4 made through the model's own ``_tie_weights()`` methods (its ``tie_weights`` called
    each module's on every load), replayed with every change held back: target -> source, names relative to
    ``model``. ``{}`` when no module defines one; None when one raises (code calling a 4.x helper that is gone)."""
    tiers = [m for m in model.modules() if _defines(m, "_tie_weights")]
    if not tiers:
        return {}
    names: dict[int, str] = {}
    for name, tensor in _tensors(model):
        names.setdefault(id(tensor), name)
    before = {name: id(tensor) for name, tensor in _tensors(model)}
    ties: dict[str, str] = {}
    try:
        with _held_back(model, (), InitWrites()):
            for module in tiers:
                module._tie_weights()
            for name, tensor in _tensors(model):
                if before.get(name) != id(tensor) and id(tensor) in names and names[id(tensor)] != name:
                    ties[name] = names[id(tensor)]
    except Exception:  # the model's own code, on a transformers it was not written for
        return None
    return ties


def ran_initialization(model: nn.Module) -> bool:
    """Whether transformers' init pass ran on ``model`` (``from_pretrained`` flags every module it visits): only then
    did a key the checkpoint lacked go through ``empty_like`` before initialization."""
    return bool(vars(model).get("_is_hf_initialized", False))


__all__ = ["Replay", "initialization", "ran_initialization", "v4_ties"]
