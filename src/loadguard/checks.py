"""The checks: what counts as broken, tensor by tensor.

Each check is a small pure function: (the tensor as loaded, what it should be) -> a Finding or None. Float
tolerances per dtype are defined here and nowhere else; the statuses and which of them fail an audit in
:mod:`loadguard.statuses`.
"""

from __future__ import annotations

import torch

from .inventory import TensorEntry
from .report import Finding, finite_or_none
from .statuses import FAILING_STATUSES, Check, Status, is_failing  # noqa: F401  (checks.Status & co. stay importable)


# (rtol, atol) for comparing a buffer with the value its code computes, by the loaded dtype: a couple of
# units in the last place, so recomputing in another order or dtype passes and leftover memory does not.
FLOAT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 1e-4),
    torch.bfloat16: (1.6e-2, 1e-3),
}
_DEFAULT_TOLERANCE = (1.6e-2, 1e-3)  # float8 and other narrow types

# A float magnitude no real weight or buffer has; leftover memory often does (1e37, 3e38).
_ABSURD_MAGNITUDE = 1e30


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return FLOAT_TOLERANCES.get(dtype, _DEFAULT_TOLERANCE)


def _finding(entry: TensorEntry, check: Check, status: Status, detail: str, diff: float | None = None) -> Finding:
    return Finding(
        tensor=entry.name,
        kind=entry.kind,
        check=check.value,
        status=status.value,
        dtype=str(entry.dtype).replace("torch.", ""),
        shape=entry.shape,
        device=str(entry.device),
        detail=detail,
        max_abs_diff=finite_or_none(diff),
        persistent=entry.persistent,
        alias_of=entry.alias_of,
    )


# ----------------------------------------------------------------------------------------------------
# Value helpers


def garbage(tensor: torch.Tensor) -> str | None:
    """Why ``tensor`` looks like uninitialized memory (NaN, infinities, INT_MAX, absurd magnitudes),
    or None when nothing about its values alone says so."""
    if tensor.numel() == 0 or tensor.dtype == torch.bool:
        return None
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        values = tensor.detach()
        nan = int(torch.isnan(values).sum())
        if nan:
            return f"{nan} of {values.numel()} values are NaN"
        inf = int(torch.isinf(values).sum())
        if inf:
            return f"{inf} of {values.numel()} values are infinite"
        absurd = int((values.abs() > _ABSURD_MAGNITUDE).sum())
        if absurd:
            return f"{absurd} of {values.numel()} values exceed {_ABSURD_MAGNITUDE:g} in magnitude"
        return None
    top = torch.iinfo(tensor.dtype).max
    count = int((tensor == top).sum())
    if count:
        return f"{count} of {tensor.numel()} values are the integer maximum {top}"
    return None


def max_abs_diff(loaded: torch.Tensor, expected: torch.Tensor) -> float:
    if loaded.dtype == torch.bool:
        return float((loaded != expected).sum())
    return float((loaded.double() - expected.double()).abs().max()) if loaded.numel() else 0.0


def matches(loaded: torch.Tensor, expected: torch.Tensor) -> bool:
    """``loaded`` equals ``expected`` (already in its dtype and device): exact for integers and bools,
    within :data:`FLOAT_TOLERANCES` for floats; NaN only matches NaN."""
    if loaded.shape != expected.shape:
        return False
    if torch.equal(loaded, expected):
        return True
    if not loaded.dtype.is_floating_point:
        return False
    rtol, atol = tolerance(loaded.dtype)
    return bool(torch.isclose(loaded, expected, rtol=rtol, atol=atol, equal_nan=True).all())


def _describe_difference(loaded: torch.Tensor, expected: torch.Tensor) -> tuple[Status, str]:
    """Classify a buffer that differs from its reference: leftover memory, or a different value."""
    reason = garbage(loaded)
    if reason:
        return Status.UNINITIALIZED, reason
    if loaded.dtype == torch.bool:
        if bool(loaded.all()) and not bool(expected.all()):
            return Status.UNINITIALIZED, f"all {loaded.numel()} values are True; the code computes {int((~expected).sum())} False"
        return Status.MISMATCH, f"{int((loaded != expected).sum())} of {loaded.numel()} values differ"
    if not bool(loaded.any()) and bool(expected.any()):
        return Status.UNINITIALIZED, "all values are zero; the code computes non-zero values"
    differing = int((loaded != expected).sum())
    return Status.MISMATCH, (
        f"{differing} of {loaded.numel()} values differ from what the model's code computes "
        "(leftover memory, or a value changed after loading)"
    )


# ----------------------------------------------------------------------------------------------------
# The checks


def check_meta_leftover(entry: TensorEntry, offloaded: str | None = None) -> Finding | None:
    """A tensor still on the meta device. ``offloaded``: why an offloaded tensor could not be verified (it is
    reported, but only a tensor with no value anywhere fails)."""
    if not entry.on_meta:
        return None
    if offloaded:
        return _finding(entry, Check.META_LEFTOVER, Status.UNVERIFIABLE, offloaded)
    return _finding(entry, Check.META_LEFTOVER, Status.ON_META, "still on the meta device: it has no value at all")


def check_non_persistent_buffer(
    entry: TensorEntry, loaded: torch.Tensor, reference: torch.Tensor | None, unverifiable_reason: str | None
) -> Finding | None:
    """A non-persistent buffer (never in a checkpoint) against what the model's code computes."""
    if reference is None:
        reason = garbage(loaded)
        if reason:
            return _finding(entry, Check.NON_PERSISTENT_BUFFER, Status.UNINITIALIZED, f"{reason} (no reference: {unverifiable_reason})")
        return _finding(entry, Check.NON_PERSISTENT_BUFFER, Status.UNVERIFIABLE, f"not compared: {unverifiable_reason}; no NaN/Inf found")
    expected = reference.to(device=loaded.device, dtype=loaded.dtype)
    if tuple(expected.shape) != tuple(loaded.shape):
        return _finding(entry, Check.NON_PERSISTENT_BUFFER, Status.MISMATCH, f"shape {tuple(loaded.shape)}, the code computes {tuple(expected.shape)}")
    if matches(loaded, expected):
        return None
    status, detail = _describe_difference(loaded, expected)
    return _finding(entry, Check.NON_PERSISTENT_BUFFER, status, detail, max_abs_diff(loaded, expected))


# Elements per slice when the checkpoint's dtype or device differs from the loaded tensor's: the cast (and the
# copy to the tensor's device) is made a slice at a time, so no full-size temporary is ever allocated.
CHUNK = 1 << 22


_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads()), thread_name_prefix="loadguard-compare")
    return _POOL


def _words(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor's bytes as the widest integers they align to (comparing int64 is ~3x faster than
    comparing bfloat16 values)."""
    flat = tensor.reshape(-1).view(torch.uint8)
    for dtype, size in ((torch.int64, 8), (torch.int32, 4)):
        if flat.numel() % size == 0 and flat.data_ptr() % size == 0:
            return flat.view(dtype)
    return flat


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    wa, wb = _words(a), _words(b)
    if wa.dtype != wb.dtype:
        wa, wb = a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    return torch.equal(wa, wb)


def _cpu_contiguous(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two CPU tensors of one dtype and shape hold the same bytes (then they are equal; the converse
    fails only for 0.0 vs -0.0 and NaN payloads, which the value comparison after it handles). Large ones are
    split across threads (torch releases the GIL)."""
    if a.dtype != b.dtype or a.shape != b.shape or not _cpu_contiguous(a, b):
        return False
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    parts = max(1, min(torch.get_num_threads(), flat_a.numel() // CHUNK))
    if parts == 1:
        return _same_bytes(flat_a, flat_b)
    step = -(-flat_a.numel() // parts)
    return all(_pool().map(lambda i: _same_bytes(flat_a[i : i + step], flat_b[i : i + step]), range(0, flat_a.numel(), step)))


def equal_after_cast(loaded: torch.Tensor, stored: torch.Tensor) -> bool:
    """``torch.equal(loaded, stored.to(loaded.dtype, loaded.device))`` without materializing the cast: slice by
    slice (a contiguous loaded tensor), each cast where ``loaded`` lives, slices in parallel on CPU."""
    if stored.dtype == loaded.dtype and stored.device == loaded.device:
        return bytes_equal(loaded, stored) or torch.equal(loaded, stored)
    if not (loaded.is_contiguous() and stored.is_contiguous()):
        return torch.equal(loaded, stored.to(device=loaded.device, dtype=loaded.dtype))
    flat_loaded, flat_stored = loaded.reshape(-1), stored.reshape(-1)

    def chunk(start: int) -> bool:
        part = flat_loaded[start : start + CHUNK]
        piece = flat_stored[start : start + CHUNK].to(device=loaded.device, dtype=loaded.dtype)
        return (_cpu_contiguous(part, piece) and _same_bytes(part, piece)) or torch.equal(part, piece)

    starts = range(0, flat_loaded.numel(), CHUNK)
    if loaded.device.type != "cpu" or len(starts) == 1:
        return all(chunk(start) for start in starts)
    return all(_pool().map(chunk, starts))


def check_checkpoint_fidelity(entry: TensorEntry, loaded: torch.Tensor, stored: torch.Tensor, key: str, resized: bool = False) -> Finding | None:
    """A state-dict tensor against its checkpoint value after the same dtype cast: exact equality. The common
    case (equal) streams: see :func:`equal_after_cast`; only a tensor that differs is looked at in full.

    ``resized``: transformers reports this tensor among its ``mismatched_keys`` (a size mismatch the load was asked
    to ignore, ``ignore_mismatched_sizes=True``): then a shape that differs from the checkpoint's is the request,
    and the tensor is ``initialized`` unless its values are leftover memory."""
    if tuple(stored.shape) != tuple(loaded.shape):
        if resized:
            reason = garbage(loaded)
            if reason:
                return _finding(entry, Check.CHECKPOINT_FIDELITY, Status.UNINITIALIZED, f"size mismatch ignored on request, then never initialized: {reason}")
            return _finding(
                entry, Check.CHECKPOINT_FIDELITY, Status.INITIALIZED,
                f"size mismatch ignored on request (ignore_mismatched_sizes): checkpoint {key!r} has {tuple(stored.shape)}, the model "
                f"{tuple(loaded.shape)}; initialized by the model's code, as transformers reports (mismatched_keys)",
            )
        return _finding(entry, Check.CHECKPOINT_FIDELITY, Status.MISMATCH, f"shape {tuple(loaded.shape)}, checkpoint {key!r} has {tuple(stored.shape)}")
    if equal_after_cast(loaded, stored):
        return None
    expected = stored.to(device=loaded.device, dtype=loaded.dtype)
    if loaded.dtype.is_floating_point and bool((torch.isnan(loaded) == torch.isnan(expected)).all()) and torch.equal(
        torch.nan_to_num(loaded), torch.nan_to_num(expected)
    ):
        return None  # the checkpoint itself holds NaN in the same places
    diff = max_abs_diff(loaded, expected)
    reason = garbage(loaded)
    if reason and not garbage(expected):
        return _finding(entry, Check.CHECKPOINT_FIDELITY, Status.UNINITIALIZED, f"{reason}; checkpoint {key!r} holds real values", diff)
    differing = int((loaded != expected).sum())
    return _finding(
        entry,
        Check.CHECKPOINT_FIDELITY,
        Status.OVERWRITTEN,
        f"{differing} of {loaded.numel()} values differ from checkpoint {key!r}: overwritten after loading",
        diff,
    )


def is_quantized(tensor: torch.Tensor) -> bool:
    """A tensor a quantizer replaced on load (torchao, bitsandbytes, quanto keep their own tensor classes)."""
    return type(tensor) not in (torch.Tensor, torch.nn.Parameter) and type(tensor).__name__ != "Weightless"


def check_quantized(entry: TensorEntry, tensor: torch.Tensor, key: str) -> Finding:
    """A weight stored quantized: its values are a quantization of the checkpoint's, not the checkpoint's."""
    return _finding(
        entry,
        Check.CHECKPOINT_FIDELITY,
        Status.UNVERIFIABLE,
        f"quantized on load ({type(tensor).__name__}): holds a quantization of checkpoint {key!r}, not its values; not compared",
    )


def check_fused(entry: TensorEntry, key: str) -> Finding:
    """A state-dict tensor transformers builds from several checkpoint keys: not comparable one to one."""
    return _finding(
        entry,
        Check.CHECKPOINT_FIDELITY,
        Status.UNVERIFIABLE,
        f"built by transformers from several checkpoint keys (e.g. {key!r}): not compared",
    )


CONSTANT_FILLS = frozenset({"zero_", "fill_", "ones_", "zeros_"})
CONSTANT_FILL_NOTE = "a constant fill, harmless only if the checkpoint holds exactly that constant"


def check_predicted_write(entry: TensorEntry, ops: list[str], replaced: bool) -> Finding:
    """A scan: weight initialization wrote into (or replaced) a tensor after it was loaded. Without the
    weights, a constant fill (``zero_``, ``fill_``) cannot be told from a no-op on a checkpoint that holds that
    constant; it is still an overwrite of whatever the checkpoint holds, and says so."""
    if replaced:
        detail = "weight initialization replaces it with a new tensor after loading: the checkpoint's value is lost"
    else:
        kinds = sorted(set(ops))
        detail = f"weight initialization writes into it after loading ({', '.join(kinds)})"
        if set(kinds) <= CONSTANT_FILLS:
            detail += f": {CONSTANT_FILL_NOTE}"
    return _finding(entry, Check.CHECKPOINT_FIDELITY, Status.OVERWRITTEN, detail)


def check_missing_key(entry: TensorEntry, loaded: torch.Tensor, reference: torch.Tensor | None, reported: bool = False) -> Finding:
    """A state-dict tensor the checkpoint does not hold: initialized by code, not loaded.

    ``reported``: transformers lists it among the load's ``missing_keys`` (a head loaded from a base checkpoint, a
    parameter added since): with a real value it is ``initialized``, never failing; leftover memory still fails."""
    if reference is not None:
        expected = reference.to(device=loaded.device, dtype=loaded.dtype)
        if expected.shape == loaded.shape and matches(loaded, expected):
            return _finding(entry, Check.MISSING_KEY, Status.UNVERIFIABLE, "not in the checkpoint; equals what the model's code computes")
        if expected.shape == loaded.shape:
            status, detail = _describe_difference(loaded, expected)
            return _finding(entry, Check.MISSING_KEY, status, f"not in the checkpoint; {detail}", max_abs_diff(loaded, expected))
    reason = garbage(loaded)
    if reason:
        return _finding(entry, Check.MISSING_KEY, Status.UNINITIALIZED, f"not in the checkpoint and never initialized: {reason}")
    if reported:
        return _finding(
            entry, Check.MISSING_KEY, Status.INITIALIZED,
            "missing from the checkpoint: initialized by the model's _init_weights, as transformers reports (missing_keys)",
        )
    return _finding(
        entry,
        Check.MISSING_KEY,
        Status.UNVERIFIABLE,
        "initialized by code, not loaded: not in the checkpoint; no NaN/Inf/INT_MAX found "
        "(load under loadguard.poison() so leftover memory cannot pass for a value)",
    )
