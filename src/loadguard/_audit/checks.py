"""The checks: what counts as broken, tensor by tensor.

Each check is a small pure function: (the tensor as loaded, what it should be) -> a Finding or None. Float
tolerances per dtype are defined here and nowhere else; the statuses and which of them fail an audit in
:mod:`loadguard.report`.
"""

from __future__ import annotations

from typing import Any

import torch

from .._hf import Replay
from ..report import Check, Finding, Status, finite_or_none
from .equality import equal_after_cast
from .inventory import TensorEntry
from .leftover import garbage, garbage_and_finite

# (rtol, atol) for comparing a buffer with the value its code computes, by the loaded dtype: a couple of
# units in the last place, so recomputing in another order or dtype passes and leftover memory does not.
FLOAT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-12, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 1e-4),
    torch.bfloat16: (1.6e-2, 1e-3),
}
_DEFAULT_TOLERANCE = (1.6e-2, 1e-3)  # float8 and other narrow types


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


def max_abs_diff(loaded: torch.Tensor, expected: torch.Tensor) -> float:
    if loaded.dtype == torch.bool:
        return float(torch.logical_xor(loaded, expected).count_nonzero())
    return float((loaded.double() - expected.double()).abs().max()) if loaded.numel() else 0.0


def _difference(loaded: torch.Tensor, expected: torch.Tensor, finite: bool) -> float | None:
    """:func:`max_abs_diff`, or None without computing it where ``loaded`` holds NaN or infinities (a report keeps
    finite differences only: :func:`loadguard.report.finite_or_none`)."""
    return max_abs_diff(loaded, expected) if finite else None


def matches(loaded: torch.Tensor, expected: torch.Tensor) -> bool:
    """``loaded`` equals ``expected`` (already in its dtype and device): exact for integers and bools,
    within :data:`FLOAT_TOLERANCES` for floats; NaN only matches NaN."""
    if loaded.shape != expected.shape:
        return False
    if torch.equal(loaded, expected):
        return True
    return _close(loaded, expected)


def _close(loaded: torch.Tensor, expected: torch.Tensor) -> bool:
    """:func:`matches` once ``torch.equal`` said no: floats within tolerance (NaN matching NaN), nothing else."""
    if not loaded.dtype.is_floating_point:
        return False
    rtol, atol = tolerance(loaded.dtype)
    return bool(torch.isclose(loaded, expected, rtol=rtol, atol=atol, equal_nan=True).all())


_UNKNOWN = object()


def _describe_difference(
    loaded: torch.Tensor, expected: torch.Tensor, found: Any = _UNKNOWN
) -> tuple[Status, str, float | None]:
    """Classify a buffer that differs from its reference: leftover memory, or a different value; with the finding's
    ``max_abs_diff`` (None where the loaded values are not finite). ``found``: :func:`garbage_and_finite` of ``loaded``, when
    the caller has it already (None included: nothing found)."""
    found = garbage_and_finite(loaded) if found is _UNKNOWN else found
    if found:
        return Status.UNINITIALIZED, found[0], _difference(loaded, expected, found[1])
    if loaded.dtype == torch.bool:  # two counting passes, nothing allocated; the differing count is the difference
        size = loaded.numel()
        if int(loaded.count_nonzero()) == size:
            false = size - int(expected.count_nonzero())
            if false:
                return (
                    Status.UNINITIALIZED,
                    f"all {size} values are True; the code computes {false} False",
                    float(false),
                )
        differing = max_abs_diff(loaded, expected)
        return Status.MISMATCH, f"{int(differing)} of {size} values differ", differing
    if not bool(loaded.any()) and bool(expected.any()):
        return (
            Status.UNINITIALIZED,
            "all values are zero; the code computes non-zero values",
            max_abs_diff(loaded, expected),
        )
    differing = int((loaded != expected).count_nonzero())
    return (
        Status.MISMATCH,
        (
            f"{differing} of {loaded.numel()} values differ from what the model's code computes "
            "(leftover memory, or a value changed after loading)"
        ),
        max_abs_diff(loaded, expected),
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
            return _finding(
                entry,
                Check.NON_PERSISTENT_BUFFER,
                Status.UNINITIALIZED,
                f"{reason} (no reference: {unverifiable_reason})",
            )
        return _finding(
            entry,
            Check.NON_PERSISTENT_BUFFER,
            Status.UNVERIFIABLE,
            f"not compared: {unverifiable_reason}; no NaN/Inf found",
        )
    expected = reference.to(device=loaded.device, dtype=loaded.dtype)
    if tuple(expected.shape) != tuple(loaded.shape):
        return _finding(
            entry,
            Check.NON_PERSISTENT_BUFFER,
            Status.MISMATCH,
            f"shape {tuple(loaded.shape)}, the code computes {tuple(expected.shape)}",
        )
    if torch.equal(loaded, expected):
        return None
    found = garbage_and_finite(loaded)
    if not (found and garbage_and_finite(expected) is None) and _close(loaded, expected):
        return None  # leftover memory where the code computes none never matches: no tolerance test for it
    status, detail, diff = _describe_difference(loaded, expected, found)
    return _finding(entry, Check.NON_PERSISTENT_BUFFER, status, detail, diff)


def check_checkpoint_fidelity(
    entry: TensorEntry,
    loaded: torch.Tensor,
    stored: torch.Tensor,
    key: str,
    resized: bool = False,
    replay: Replay | None = None,
) -> Finding | None:
    """A state-dict tensor against its checkpoint value after the same dtype cast: exact equality. The common
    case (equal) streams: see :func:`equal_after_cast`; only a tensor that differs is looked at in full.

    ``resized``: transformers reports this tensor among its ``mismatched_keys`` (a size mismatch the load was asked
    to ignore, ``ignore_mismatched_sizes=True``): then a shape that differs from the checkpoint's is the request,
    and the tensor is ``initialized`` if weight initialization was seen writing it (``replay``, see
    :func:`_initialized`), ``uninitialized`` when its values are leftover memory or nothing wrote it."""
    if tuple(stored.shape) != tuple(loaded.shape):
        if resized:
            reason = garbage(loaded)
            if reason:
                return _finding(
                    entry,
                    Check.CHECKPOINT_FIDELITY,
                    Status.UNINITIALIZED,
                    f"size mismatch ignored on request, then never initialized: {reason}",
                )
            what = (
                f"size mismatch ignored on request (ignore_mismatched_sizes): checkpoint {key!r} has {tuple(stored.shape)}, the model "
                f"{tuple(loaded.shape)}"
            )
            return _initialized(entry, Check.CHECKPOINT_FIDELITY, what, "mismatched_keys", replay)
        return _finding(
            entry,
            Check.CHECKPOINT_FIDELITY,
            Status.MISMATCH,
            f"shape {tuple(loaded.shape)}, checkpoint {key!r} has {tuple(stored.shape)}",
        )
    if equal_after_cast(loaded, stored):
        return None
    expected = stored.to(device=loaded.device, dtype=loaded.dtype)
    if (
        loaded.dtype.is_floating_point
        and bool((torch.isnan(loaded) == torch.isnan(expected)).all())
        and torch.equal(torch.nan_to_num(loaded), torch.nan_to_num(expected))
    ):
        return None  # the checkpoint itself holds NaN in the same places
    found = garbage_and_finite(loaded)
    diff = _difference(loaded, expected, found is None or found[1])
    if found and not garbage(expected):
        return _finding(
            entry,
            Check.CHECKPOINT_FIDELITY,
            Status.UNINITIALIZED,
            f"{found[0]}; checkpoint {key!r} holds real values",
            diff,
        )
    differing = int((loaded != expected).count_nonzero())
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


def check_predicted_write(entry: TensorEntry, ops: list[str], replaced: bool, where: str | None = None) -> Finding:
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
    if where:
        detail += f" [at {where}]"
    return _finding(entry, Check.CHECKPOINT_FIDELITY, Status.OVERWRITTEN, detail)


def check_tie(
    entry: TensorEntry,
    loaded: torch.Tensor,
    source: str,
    source_value: torch.Tensor | None,
    how: str,
    loaded_from: str | None,
) -> Finding | None:
    """A tensor the model declares tied to ``source`` that is not the same tensor: its value must still be the
    source's. ``loaded_from``: the checkpoint key it was loaded from (None: not in the checkpoint, so whatever it holds
    came from initialization). ``source_value`` None: a scan, where only the missing tie can be seen."""
    if source_value is None:
        if loaded_from is not None:
            return None
        return _finding(
            entry,
            Check.TIED_WEIGHTS,
            Status.MISMATCH,
            f"declared tied to {source} ({how}) and not in the checkpoint, but not tied after loading: it keeps whatever initialized it",
        )
    if tuple(source_value.shape) == tuple(loaded.shape) and (
        loaded.device.type == "meta" or source_value.device.type == "meta"
    ):
        return None
    if tuple(source_value.shape) == tuple(loaded.shape) and torch.equal(
        loaded, source_value.to(device=loaded.device, dtype=loaded.dtype)
    ):
        return None
    if how != "mapping" and loaded_from is not None:
        return None  # a 4.x-style list is a hint, not a mapping: a value the checkpoint gave it stands
    differing = (
        int((loaded != source_value.to(device=loaded.device, dtype=loaded.dtype)).sum())
        if source_value.shape == loaded.shape
        else loaded.numel()
    )
    origin = (
        f"loaded from checkpoint key {loaded_from!r}"
        if loaded_from
        else "not in the checkpoint: it holds what initialized it, never tied"
    )
    return _finding(
        entry,
        Check.TIED_WEIGHTS,
        Status.MISMATCH,
        f"declared tied to {source} ({how}), but not the same tensor and {differing} of {loaded.numel()} values differ ({origin})",
        max_abs_diff(loaded, source_value.to(device=loaded.device, dtype=loaded.dtype))
        if source_value.shape == loaded.shape
        else None,
    )


def _initialized(
    entry: TensorEntry, check: Check, what: str, reported_as: str | None, replay: Replay | None
) -> Finding:
    """A tensor the load did not fill from the checkpoint (``what``) and whose values look real: ``initialized`` only
    when weight initialization was seen writing it.

    ``replay``: transformers' own init pass replayed on the loaded model with every write held back
    (:mod:`loadguard._hf.replay`), given when that pass ran on the load, so the tensor went through ``empty_like``
    first. It wrote the tensor: ``initialized``, with the line that wrote it. It did not: ``uninitialized`` (whatever
    transformers' loading info says: ``reported_as`` names the list that calls it newly initialized). It could not
    finish: ``unverifiable``, with why. No replay (a model that was not loaded by ``from_pretrained``): transformers'
    report is the only evidence, and the finding says so."""
    claim = f"transformers reports it newly initialized ({reported_as})" if reported_as else ""
    if replay is not None and not replay.covers(entry.name):
        replay = None  # a tensor the replay did not watch (transformers flagged it loaded): it observed nothing of it
    if replay is None:
        if reported_as:
            return _finding(
                entry, check, Status.INITIALIZED, f"{what}: initialized by the model's code, as {claim}; not replayed"
            )
        return _finding(
            entry,
            check,
            Status.UNVERIFIABLE,
            f"{what}: initialized by code, not loaded; no NaN/Inf/INT_MAX found "
            "(load under loadguard.poison() so leftover memory cannot pass for a value)",
        )
    if replay.wrote(entry.name):
        where = replay.written.get(entry.name) or ""
        how = "replaced by" if entry.name in replay.replaced else "written by"
        at = f" at {where}" if where else ""
        return _finding(
            entry,
            check,
            Status.INITIALIZED,
            f"{what}: {how} weight initialization{at} (seen in a replay){'; ' + claim if claim else ''}",
        )
    if replay.error:
        return _finding(
            entry,
            check,
            Status.UNVERIFIABLE,
            f"{what}: {claim or 'not loaded'}, but replaying weight initialization failed ({replay.error}): whether anything "
            "wrote it is not known (load under loadguard.poison() to make leftover memory NaN)",
        )
    ran = ", ".join(replay.ran[:3]) + (", ..." if len(replay.ran) > 3 else "")
    said = f"{claim}, but nothing wrote it" if claim else "nothing wrote it"
    return _finding(
        entry,
        check,
        Status.UNINITIALIZED,
        f"{what}: {said}: weight initialization ({ran}) has no branch for it, so it holds the memory the load gave it "
        "(torch.empty_like), not a value",
    )


def check_missing_key(
    entry: TensorEntry,
    loaded: torch.Tensor,
    reference: torch.Tensor | None,
    reported: bool = False,
    replay: Replay | None = None,
) -> Finding:
    """A state-dict tensor the checkpoint does not hold: initialized by code, not loaded.

    ``reported``: transformers lists it among the load's ``missing_keys`` (a head loaded from a base checkpoint, a
    parameter added since). With real-looking values it is ``initialized`` when weight initialization was seen
    writing it (``replay``: see :func:`_initialized`), ``uninitialized`` when nothing did; leftover memory fails."""
    if reference is not None:
        expected = reference.to(device=loaded.device, dtype=loaded.dtype)
        if expected.shape == loaded.shape and matches(loaded, expected):
            return _finding(
                entry,
                Check.MISSING_KEY,
                Status.UNVERIFIABLE,
                "not in the checkpoint; equals what the model's code computes",
            )
        if expected.shape == loaded.shape:
            status, detail, diff = _describe_difference(loaded, expected)
            return _finding(entry, Check.MISSING_KEY, status, f"not in the checkpoint; {detail}", diff)
    reason = garbage(loaded)
    if reason:
        return _finding(
            entry, Check.MISSING_KEY, Status.UNINITIALIZED, f"not in the checkpoint and never initialized: {reason}"
        )
    return _initialized(
        entry, Check.MISSING_KEY, "missing from the checkpoint", "missing_keys" if reported else None, replay
    )
