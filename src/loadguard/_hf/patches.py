"""Every piece of torch / transformers machinery the scan relies on, in one place.

A scan runs the installed transformers' own ``from_pretrained`` on a state dict of :class:`Weightless` tensors:
meta tensors that stay on meta wherever the loader moves them (``.to(device)``, ``.cuda()``, ``.cpu()``), so
renaming, fusing, loaded-flags, ``_move_missing_keys_from_meta_to_device``, ``_initialize_missing_keys`` /
``_init_weights`` and tying all run as they would, and no weight byte exists. Around it:

- :func:`recording_init_writes` wraps ``PreTrainedModel._initialize_missing_keys`` to record in-place writes to
  (and replacements of) tensors that were loaded before it ran (in 4.x it runs before loading, so it can never see a
  loaded tensor, as a real 4.x load cannot overwrite one);
- :func:`parameters_stay_on_meta` keeps ``Module.to_empty`` (``torch.nn.utils.skip_init``: ChatGLM) from
  materializing parameters;
- :func:`large_tensors_on_meta` creates tensors over a size on the meta device directly (a reference build of a
  model with 25-77 GB fused experts would otherwise allocate them on CPU first);
- :func:`meta_writes_skipped` returns at once from in-place initialization ops on meta tensors (``normal_``,
  ``uniform_``, ...: they change nothing there and draw no random numbers, but cost ~0.2 ms each through torch's
  Python meta kernels: a model with 70,000 linear layers spent most of its scan in them), recording those that
  land on loaded tensors.

Each is undone in ``finally``. When transformers lacks what one relies on, :class:`loadguard.errors.ScanError`
says so with the version: never a wrong verdict. Which versions all this is proven on is not written here: the
self-check (:mod:`loadguard._scan.selfcheck`) proves each version the first time a scan runs on it, and records it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

from ..errors import ScanError
from .ties import saved_state_dict
from .writes import InitWrites, WriteRecorder, storage_of


class Weightless(torch.Tensor):
    """A meta tensor with a checkpoint key's shape and dtype that stays on meta wherever it is moved."""

    @staticmethod
    def __new__(cls, shape, dtype: torch.dtype):
        return torch.Tensor._make_subclass(cls, torch.empty(tuple(shape), dtype=dtype, device="meta"))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.to:
            kwargs.pop("device", None)
            kwargs.pop("non_blocking", None)
            args = (
                args[0],
                *(a for a in args[1:] if not isinstance(a, (str, torch.device, int)) or isinstance(a, bool)),
            )
        elif func in (torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.pin_memory):
            return args[0]
        return super().__torch_function__(func, types, args, kwargs)


WEIGHTLESS_METHOD = (
    "transformers' own from_pretrained on a state dict of weightless meta tensors ({keys}); hub kernels not applied "
    "(transformers >= 5.25 kernelizes every load by default: kernels swap layers' code, never their tensors, and refuse "
    "the meta device)"
)


def weightless_load_options() -> dict:
    """``from_pretrained`` options of a weightless load: no hub kernels (``use_kernels`` exists since transformers
    4.54 and defaults to on from 5.25; ``kernelize`` raises on meta tensors, and swaps code, not tensors)."""
    return {"use_kernels": False}


def weightless_state_dict(shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, Weightless]:
    return {key: Weightless(shape, dtype) for key, (shape, dtype) in shapes.items()}


class CompleteKeys(dict):
    """A weightless state dict holding every key of the model's own state dict: filled by
    :func:`complete_keys_from_the_model` once transformers has constructed the model (constructing it a second
    time just to learn its keys would double a scan's cost). ``saved``: only the keys a ``save_pretrained`` of this
    code writes (the targets of its declared ties dropped)."""

    def __init__(self, saved: bool = False):
        super().__init__()
        self.saved = saved


@contextlib.contextmanager
def complete_keys_from_the_model() -> Iterator[bool]:
    """Wrap ``PreTrainedModel._load_pretrained_model`` (its first two arguments are the model and the state dict
    on transformers 4.57 and 5.24) to fill a :class:`CompleteKeys` from the model. Yields False where the method
    is not there (the caller then builds the keys itself)."""
    from transformers import PreTrainedModel

    descriptor = PreTrainedModel.__dict__.get("_load_pretrained_model")
    if not isinstance(descriptor, (staticmethod, classmethod)):
        yield False
        return
    function = descriptor.__func__

    def fill(model, state_dict) -> None:
        if isinstance(state_dict, CompleteKeys) and not state_dict:
            for key, value in (saved_state_dict(model) if state_dict.saved else model.state_dict()).items():
                state_dict[key] = Weightless(value.shape, value.dtype)

    if isinstance(descriptor, staticmethod):

        def load_static(model, state_dict, *args, **kwargs):
            fill(model, state_dict)
            return function(model, state_dict, *args, **kwargs)

        PreTrainedModel._load_pretrained_model = staticmethod(load_static)
    else:

        def load_class(cls, model, state_dict, *args, **kwargs):
            fill(model, state_dict)
            return function(cls, model, state_dict, *args, **kwargs)

        PreTrainedModel._load_pretrained_model = classmethod(load_class)
    try:
        yield True
    finally:
        PreTrainedModel._load_pretrained_model = descriptor


def loaded_tensors(model: torch.nn.Module) -> dict[str, int]:
    """Names of the model's parameters and buffers that hold a :class:`Weightless` (loaded by the scan), with
    their storage."""
    out = {}
    for name, tensor in list(model.named_parameters(remove_duplicate=False)) + list(
        model.named_buffers(remove_duplicate=False)
    ):
        if isinstance(tensor, Weightless):
            out[name] = storage_of(tensor)
    return out


# In-place ops that only write values: on a meta tensor they are no-ops (shape checks aside).
_VALUE_WRITES = frozenset(
    "normal_ uniform_ zero_ fill_ copy_ exponential_ geometric_ log_normal_ cauchy_ random_ bernoulli_ erfinv_ mul_ add_ "
    "sub_ div_ clamp_ clamp_min_ clamp_max_ addcmul_ addcdiv_ fill_diagonal_ masked_fill_ index_fill_ sqrt_ exp_ neg_ "
    "abs_ __setitem__".split()
)


class _MetaWrites(TorchFunctionMode):
    def __init__(self, watched: dict[int, list[str]] | None = None, record: InitWrites | None = None):
        super().__init__()
        self.watched, self.record = watched or {}, record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        target = args[0] if args else (kwargs or {}).get("tensor")
        name = getattr(func, "__name__", "")
        initializer = getattr(func, "__module__", "") == "torch.nn.init" and name.endswith("_")
        if (
            isinstance(target, torch.Tensor)
            and target.device.type == "meta"
            and (name in _VALUE_WRITES or initializer)
        ):
            if self.record is not None:
                for loaded in self.watched.get(storage_of(target), ()):
                    self.record.note(loaded, name)
            return None if name == "__setitem__" else target
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def meta_writes_skipped() -> Iterator[None]:
    """In-place value writes to meta tensors return at once (construction and init of a model on meta)."""
    with _MetaWrites():
        yield


@contextlib.contextmanager
def constructing_with_meta_writes_skipped(cls: type) -> Iterator[None]:
    """:func:`meta_writes_skipped` around ``cls.__init__`` only (a torch function mode costs a little on every
    torch call: loading 70,000 weightless tensors is not slowed by it)."""
    original = cls.__dict__.get("__init__")
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        # model code that picks its own device (Linear(..., device="cpu"), torch.zeros(..., device=init_device))
        # would allocate every weight for real, outside transformers' meta context: a weightless load needs none
        # of it (loaded tensors are replaced, the rest initialized on meta), so tensors over 1 MiB go to meta
        with _MetaWrites(), _LargeOnMeta(1 << 20, _FACTORIES, any_device=True):
            init(self, *args, **kwargs)

    cls.__init__ = __init__
    try:
        yield
    finally:
        if original is None:
            del cls.__init__
        else:
            cls.__init__ = original


@contextlib.contextmanager
def recording_init_writes(record: InitWrites) -> Iterator[None]:
    """Record, on ``record``, in-place writes and replacements that weight initialization makes to loaded tensors."""
    import transformers
    from transformers import PreTrainedModel

    original = PreTrainedModel.__dict__.get("_initialize_missing_keys")
    if original is None:
        raise ScanError(
            f"transformers {transformers.__version__} has no PreTrainedModel._initialize_missing_keys, which the scan "
            "watches to predict overwritten weights",
            "audit a full load instead (loadguard audit), or scan with a transformers version the self-check proved "
            "(loadguard selfcheck lists them)",
        )

    def initialize(self, *args, **kwargs):
        before = loaded_tensors(self)
        watched: dict[int, list[str]] = {}
        for name, storage in before.items():
            watched.setdefault(storage, []).append(name)
        record.ran = True
        with WriteRecorder(watched, record), _MetaWrites(watched, record):
            result = original(self, *args, **kwargs)
        after = loaded_tensors(self)
        record.replaced |= {name for name, storage in before.items() if after.get(name) != storage}
        return result

    PreTrainedModel._initialize_missing_keys = initialize
    try:
        yield
    finally:
        PreTrainedModel._initialize_missing_keys = original


@contextlib.contextmanager
def parameters_stay_on_meta() -> Iterator[None]:
    """``Module.to_empty`` allocates only buffers: parameters stay meta (they are loaded, or initialized later)."""
    original = torch.nn.Module.to_empty

    def to_empty(self, *, device, recurse=True):
        for module in self.modules() if recurse else [self]:
            for name, buffer in list(module._buffers.items()):
                if buffer is not None:
                    module._buffers[name] = torch.empty_like(buffer, device=device)
        return self

    torch.nn.Module.to_empty = to_empty
    try:
        yield
    finally:
        torch.nn.Module.to_empty = original


_FACTORIES = {
    torch.empty,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.randn,
    torch.rand,
    torch.randint,
    torch.empty_strided,
}


class _LargeOnMeta(TorchFunctionMode):
    def __init__(self, threshold: int, factories=_FACTORIES, any_device: bool = False):
        super().__init__()
        self.threshold, self.factories, self.any_device = threshold, factories, any_device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.factories and (self.any_device or kwargs.get("device") in (None, "cpu", torch.device("cpu"))):
            size = kwargs.get("size") or next((a for a in args if isinstance(a, (tuple, list, torch.Size))), None)
            if size is None:
                size = tuple(a for a in args if isinstance(a, int) and not isinstance(a, bool))
            count = 1
            for dim in size or ():
                count *= int(dim)
            dtype = kwargs.get("dtype") or torch.get_default_dtype()
            if count * torch.empty((), dtype=dtype, device="meta").element_size() > self.threshold:
                kwargs["device"] = "meta"
        return func(*args, **kwargs)


@contextlib.contextmanager
def large_tensors_on_meta(threshold: int = 1 << 30) -> Iterator[None]:
    """Factory calls (``torch.empty`` and friends) for tensors over ``threshold`` bytes create them on meta."""
    with _LargeOnMeta(threshold):
        yield


@contextlib.contextmanager
def uninitialized_tensors_on_meta(threshold: int = 1 << 20) -> Iterator[None]:
    """``torch.empty`` over ``threshold`` bytes creates its tensor on meta: how layers make their parameters
    (a buffer holds computed values, and is made by ``arange``/``ones``/numpy, not by ``empty``). A reference
    build then never allocates parameter memory (accelerate would create each on CPU first)."""
    with _LargeOnMeta(threshold, {torch.empty, torch.empty_strided}):
        yield


class InitCalls(set):
    """The ids of the modules ``_init_weights`` was called for; ``observed``: whether the running transformers has the
    per-module gate that was watched (else the set says nothing)."""

    observed = False


@contextlib.contextmanager
def init_weights_calls() -> Iterator[InitCalls]:
    """The ids of the modules transformers called the model's ``_init_weights`` for while loading (transformers 5 skips
    a module whose parameters and buffers all loaded: a branch for it there never runs)."""
    from transformers import PreTrainedModel

    called = InitCalls()
    original = PreTrainedModel.__dict__.get("_initialize_weights")
    if original is None:  # a transformers without the per-module gate: nothing to tell
        yield called
        return
    called.observed = True

    def recording(self, module, *args, **kwargs):
        own = type(self)._init_weights

        def init_weights(target):
            called.add(id(target))
            return own(self, target)

        vars(self)["_init_weights"] = init_weights
        try:
            return original(self, module, *args, **kwargs)
        finally:
            vars(self).pop("_init_weights", None)

    PreTrainedModel._initialize_weights = recording
    try:
        yield called
    finally:
        PreTrainedModel._initialize_weights = original


def return_freed_memory() -> bool:
    """Process-wide (the scan CLI calls it, never the library): fix glibc's mmap threshold at 128 KiB.

    Building a model's reference creates and frees many large CPU tensors; glibc then raises its dynamic mmap
    threshold (up to 32 MiB) and serves later allocations from the heap, which it keeps resident after they are
    freed: measured 450-630 MB of resident memory after constructing a 1T-parameter DeepseekV3 shape, 10 MB
    with the threshold fixed. Returns whether it could be set (glibc only)."""

    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(-3, 128 * 1024))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False
