"""Exact equality of large tensors at memory speed: bytes compared as the widest integer words they align to, slices
across threads, casts made a slice at a time (no full-size temporary). What the checkpoint-fidelity check uses."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

# Elements per slice when the checkpoint's dtype or device differs from the loaded tensor's: the cast (and the
# copy to the tensor's device) is made a slice at a time, so no full-size temporary is ever allocated.
CHUNK = 1 << 22


_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
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
    return all(
        _pool().map(lambda i: _same_bytes(flat_a[i : i + step], flat_b[i : i + step]), range(0, flat_a.numel(), step))
    )


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


__all__ = ["CHUNK", "bytes_equal", "equal_after_cast"]
