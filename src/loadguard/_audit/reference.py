"""The reference: what a model's own code computes for its buffers, built without loading anything.

The model's class is constructed from its config with parameters on the meta device and buffers real
(``accelerate.init_empty_weights(include_buffers=False)``): the buffers come out exactly as ``__init__``
and ``post_init`` compute them, at the cost of building the buffers only. It is built once per
(class, config, dtype) and cached; it never wraps a load.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from .. import workarounds as registry
from .._files import folder_of, local_config
from .._hf import large_tensors_on_meta, meta_writes_skipped, named, recording, uninitialized_tensors_on_meta
from .._infra import procs
from ..errors import ReferenceBuildError
from .inventory import Inventory

_CACHE_SIZE = 4
_cache: OrderedDict[tuple, Reference] = OrderedDict()
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Reference:
    """Reference values of a model's buffers.

    ``values`` maps every buffer name (aliases included) to the value the model's code computes, on
    CPU in the dtype the code produced. ``unverifiable`` maps buffer names that have no trustworthy
    reference to the reason. ``aliases`` maps each name to the first name of the same tensor in the
    freshly built model (names that should share one tensor).
    """

    model_class: str
    values: dict[str, torch.Tensor] = field(repr=False)
    unverifiable: dict[str, str]
    aliases: dict[str, str]
    seconds: float = 0.0
    origins: dict[str, str] = field(default_factory=dict)
    """Every tensor's name (parameters, buffers, tensor attributes; aliases too) -> ``file:line`` of the code that made
    it while the class was constructed (:mod:`loadguard._hf.origins`)."""

    def group(self, name: str) -> list[str]:
        """Every name that shares ``name``'s tensor in a correctly built model, itself included."""
        canonical = self.aliases.get(name, name)
        return [n for n, c in self.aliases.items() if c == canonical] or [name]


@contextmanager
def default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    previous = torch.get_default_dtype()
    try:
        if dtype is not None and dtype.is_floating_point:
            torch.set_default_dtype(dtype)
        yield
    finally:
        torch.set_default_dtype(previous)


_LARGE = 1 << 20  # bytes: a persistent buffer over this is not kept when the caller reads them from the checkpoint


@contextmanager
def _large_persistent_buffers_on_meta() -> Iterator[None]:
    """Persistent buffers over 1 MiB are registered on meta, the real tensor freed at once: code that quantizes itself
    keeps its weights as persistent buffers (int8 weights, scales: as large as the model), which a load reads from the
    checkpoint; building them for real would cost the model's size for values nobody compares."""
    original = nn.Module.register_buffer

    def register_buffer(self, name, tensor, persistent=True):
        if persistent and isinstance(tensor, torch.Tensor) and tensor.device.type != "meta" and tensor.nbytes > _LARGE:
            tensor = tensor.to("meta")
        return original(self, name, tensor, persistent)

    nn.Module.register_buffer = register_buffer
    try:
        yield
    finally:
        nn.Module.register_buffer = original


def _construct(model_class: type, config, persistent_buffers: bool = True, origins: dict | None = None) -> nn.Module:
    from accelerate import init_empty_weights

    # accelerate creates each parameter on CPU before moving it to meta: parameters (torch.empty) are created on
    # meta directly instead, so a 1T-parameter model's reference allocates nothing for them (fused experts of
    # 25-77 GB would fail to allocate); initializing meta parameters does nothing, so it is skipped

    persistent = contextlib.nullcontext() if persistent_buffers else _large_persistent_buffers_on_meta()
    recorded = recording(origins) if origins is not None else contextlib.nullcontext()
    with (
        recorded,
        init_empty_weights(include_buffers=False),
        uninitialized_tensors_on_meta(),
        large_tensors_on_meta(),
        meta_writes_skipped(),
        persistent,
        procs.exits_refused(f"building {model_class.__name__} as its code defines it"),
    ):
        return model_class(copy.deepcopy(config))


def persistent_buffers_needed(inventory: Inventory, held) -> bool:
    """Whether a reference must build the model's persistent buffers: one of them is not in ``held`` (the names the
    checkpoint gives a value), so its value matters (the missing-key check, repair)."""
    return any(e.name not in held for e in inventory.state_entries if e.kind == "buffer")


def _buffers(module: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    inventory = Inventory(module)
    values, aliases = {}, {}
    for entry in inventory:
        if entry.kind == "parameter":
            continue
        values[entry.name] = inventory.tensor(entry.name)
        aliases[entry.name] = entry.alias_of or entry.name
    return values, aliases


def _model_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype ``from_pretrained`` constructed the model in: that of its floating-point parameters."""
    for parameter in model.parameters():
        if parameter.dtype.is_floating_point:
            return parameter.dtype
    return None


def build_reference(
    model: nn.Module, *, detect_random: bool = True, use_cache: bool = True, persistent_buffers: bool = True
) -> Reference:
    """Build (or take from the cache) the reference of ``model``'s buffers.

    Constructs ``type(model)(model.config)`` with parameters on meta and buffers real, under the
    model's floating dtype as default dtype, exactly as ``from_pretrained`` constructs it. With
    ``detect_random``, a construction that draws random numbers is repeated under another seed: buffers
    that differ are drawn from random numbers and marked unverifiable. The caller's RNG state is left untouched.
    ``persistent_buffers=False``: persistent buffers over 1 MiB are not built (meta, no value), for a caller that
    compares only non-persistent ones (a scan whose checkpoint holds every persistent buffer).

    Raises :class:`loadguard.errors.ReferenceBuildError` if the class cannot be constructed.

    Example::

        ref = build_reference(model)
        ref.values["resampler.pos_embed"]     # what __init__ computed
        ref.unverifiable                        # {"name": "why it cannot be checked"}
    """

    config = getattr(model, "config", None)
    model_class = type(model)
    if config is None:
        raise ReferenceBuildError(
            f"{model_class.__name__} has no .config, so its reference cannot be built",
            "pass reference=None to audit without it, or audit a transformers PreTrainedModel",
        )
    dtype = _model_dtype(model)
    key = (model_class, config_fingerprint(config), dtype, detect_random, persistent_buffers)
    if use_cache:
        with _cache_lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]

    start = time.perf_counter()
    names = list(getattr(model, registry.CONSTRUCTION_ATTRIBUTE, ()))
    folder = folder_of(config)
    while True:
        try:
            # the before_import workarounds its load needed, with what they read: the model's config.json
            with (
                torch.random.fork_rng(devices=[]),
                default_dtype(dtype),
                registry.activate(names, folder, (local_config(folder) or {}) if names else {}),
            ):
                torch.manual_seed(0x10AD)
                seeded = torch.random.get_rng_state()
                sites: dict = {}
                first = _construct(model_class, config, persistent_buffers, origins=sites)
                values, aliases = _buffers(first)
                origins = named(first, sites)
                second_values: dict[str, torch.Tensor] = {}
                # only a construction that drew random numbers can have random buffers: build a second time
                # under another seed to tell which
                drew_random = not torch.equal(seeded, torch.random.get_rng_state())
                if detect_random and values and drew_random:
                    torch.manual_seed(0x6A4D)
                    second_values, _ = _buffers(_construct(model_class, config, persistent_buffers))
            break
        except Exception as error:  # the model's own code failed
            # code written for an older transformers may need the workarounds its load needed: apply the ones
            # that declare this failure (the load that produced the model must have had them too)
            more = [w.name for w in registry.matching(error) if w.name not in names]
            if more:
                names += more
                continue
            raise ReferenceBuildError(
                f"building the reference of {model_class.__name__} from its config failed: "
                f"{type(error).__name__}: {error}",
                "the model's constructor must run from its config alone; audit with reference=None to run "
                "the checks that do not need it",
            ) from error
    unverifiable: dict[str, str] = {}
    kept: dict[str, torch.Tensor] = {}
    for name, value in values.items():
        if value.device.type == "meta":
            unverifiable[name] = (
                "its value is derived from parameters or checkpoint-loaded buffers (meta in the reference build)"
            )
        elif name in second_values and not _same(value, second_values[name]):
            unverifiable[name] = "its value is drawn from random numbers (differs between two builds)"
        else:
            kept[name] = value.detach()
    reference = Reference(
        model_class=f"{model_class.__module__}.{model_class.__qualname__}",
        values=kept,
        unverifiable=unverifiable,
        aliases=aliases,
        seconds=time.perf_counter() - start,
        origins=origins,
    )
    if use_cache:
        with _cache_lock:
            _cache[key] = reference
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return reference


def config_fingerprint(config) -> str:
    """What identifies a config for the cache: a hash of its attributes, walked as data (never through its own
    ``to_dict`` / JSON, which a model's config class may override or break: a ``torch.dtype``, a set, a NaN, a
    non-string key, a sub-config that is an object). Values with no stable form are keyed by identity: a cache miss,
    never a wrong hit."""

    digest = hashlib.sha256()
    _feed(digest, config, set(), 0)
    return digest.hexdigest()


def _feed(digest, value, seen: set[int], depth: int) -> None:
    def put(*parts) -> None:
        for part in parts:
            digest.update(str(part).encode("utf-8", "backslashreplace"))
            digest.update(b"\x00")

    if depth > 64 or id(value) in seen:
        put("ref", id(value))
        return
    if value is None or isinstance(value, (bool, int, str, bytes)):
        put(type(value).__name__, repr(value))
    elif isinstance(value, float):
        put("float", "nan" if value != value else repr(value))
    elif isinstance(value, (torch.dtype, torch.device)):
        put(type(value).__name__, str(value))
    elif isinstance(value, torch.Tensor):
        put("tensor", id(value))
    elif isinstance(value, dict):
        seen.add(id(value))
        put("dict", len(value))
        items = [(_sort_key(k), k, v) for k, v in value.items()]
        for _, k, v in sorted(items, key=lambda item: item[0]):
            _feed(digest, k, seen, depth + 1)
            _feed(digest, v, seen, depth + 1)
        seen.discard(id(value))
    elif isinstance(value, (list, tuple)):
        seen.add(id(value))
        put(type(value).__name__, len(value))
        for item in value:
            _feed(digest, item, seen, depth + 1)
        seen.discard(id(value))
    elif isinstance(value, (set, frozenset)):
        put(type(value).__name__, len(value))
        for key in sorted(_sort_key(item) for item in value):
            put(key)
    else:
        attributes = getattr(value, "__dict__", None)
        put("object", f"{type(value).__module__}.{type(value).__qualname__}")
        if isinstance(attributes, dict):
            seen.add(id(value))
            _feed(
                digest,
                {k: v for k, v in attributes.items() if not (isinstance(k, str) and k.startswith("__"))},
                seen,
                depth + 1,
            )
            seen.discard(id(value))
        else:
            put("id", id(value))


def _sort_key(value) -> str:
    try:
        return f"{type(value).__name__}:{value!r}"
    except Exception:
        return f"{type(value).__name__}:{id(value)}"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return a.dtype.is_floating_point and bool(((a == b) | (a.isnan() & b.isnan())).all())


def clear_cache() -> None:
    """Forget every cached reference (frees their buffer memory)."""
    with _cache_lock:
        _cache.clear()
