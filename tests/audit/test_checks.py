"""Every check has a positive and a negative case, on hand-made tensors."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loadguard._audit import checks
from loadguard._audit.inventory import TensorEntry
from loadguard._audit.leftover import garbage
from loadguard._hf.replay import Replay
from loadguard.report import FAILING_STATUSES, is_failing


def entry(tensor, name="t", kind="buffer", persistent=False):
    return TensorEntry(name, kind, persistent, tensor.dtype, tuple(tensor.shape), tensor.device, "", name)


def test_non_persistent_buffer_equal_is_ok():
    value = torch.linspace(0, 1, 8)
    assert checks.check_non_persistent_buffer(entry(value), value.clone(), value, None) is None


def test_non_persistent_buffer_nan_is_uninitialized():
    loaded = torch.full((8,), float("nan"))
    finding = checks.check_non_persistent_buffer(entry(loaded), loaded, torch.ones(8), None)
    assert finding.status == "uninitialized" and "NaN" in finding.detail and finding.max_abs_diff is None


def test_non_persistent_buffer_zeros_and_huge_are_uninitialized():
    expected = torch.linspace(1, 2, 8)
    assert (
        checks.check_non_persistent_buffer(entry(expected), torch.zeros(8), expected, None).status == "uninitialized"
    )
    assert (
        checks.check_non_persistent_buffer(entry(expected), torch.full((8,), 1e37), expected, None).status
        == "uninitialized"
    )


def test_non_persistent_buffer_other_values_mismatch_with_diff():
    expected = torch.linspace(1, 2, 8)
    finding = checks.check_non_persistent_buffer(entry(expected), expected + 0.5, expected, None)
    assert finding.status == "mismatch" and abs(finding.max_abs_diff - 0.5) < 1e-6


def test_bool_mask_all_true_is_a_finding():
    mask = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    finding = checks.check_non_persistent_buffer(entry(mask), torch.ones(4, 4, dtype=torch.bool), mask, None)
    assert finding.status == "uninitialized" and "all 16 values are True" in finding.detail
    assert checks.check_non_persistent_buffer(entry(mask), mask.clone(), mask, None) is None


def test_integers_are_exact_and_int_max_is_uninitialized():
    index = torch.arange(5)
    assert checks.check_non_persistent_buffer(entry(index), index + 1, index, None).status == "mismatch"
    top = torch.full((5,), torch.iinfo(torch.int64).max)
    assert checks.check_non_persistent_buffer(entry(index), top, index, None).status == "uninitialized"


def test_float_tolerance_follows_dtype():
    expected = torch.linspace(1, 2, 64)
    loaded_bf16 = expected.to(torch.bfloat16)
    # the reference recomputed in float32 and cast: a bf16 ulp apart passes, a real difference does not
    nudged = (expected * (1 + 2**-8)).to(torch.bfloat16)
    assert checks.check_non_persistent_buffer(entry(loaded_bf16), nudged, expected, None) is None
    assert (
        checks.check_non_persistent_buffer(entry(loaded_bf16), (expected * 1.1).to(torch.bfloat16), expected, None)
        is not None
    )
    assert checks.check_non_persistent_buffer(entry(expected), expected * (1 + 1e-4), expected, None) is not None


def test_unverifiable_buffer_still_checked_for_nan():
    value = torch.randn(4)
    finding = checks.check_non_persistent_buffer(entry(value), value, None, "random")
    assert finding.status == "unverifiable" and "random" in finding.detail
    nan = torch.full((4,), float("nan"))
    assert checks.check_non_persistent_buffer(entry(nan), nan, None, "random").status == "uninitialized"


def test_checkpoint_fidelity_exact_after_dtype_cast():
    stored = torch.randn(16)
    loaded = stored.to(torch.bfloat16)
    e = entry(loaded, kind="parameter", persistent=True)
    assert checks.check_checkpoint_fidelity(e, loaded, stored, "w") is None
    bumped = loaded.clone()
    bumped[3] += 1
    finding = checks.check_checkpoint_fidelity(e, bumped, stored, "w")
    assert finding.status == "overwritten" and "1 of 16" in finding.detail


def test_checkpoint_fidelity_shape_and_nan():
    stored = torch.randn(4)
    e = entry(stored, kind="parameter", persistent=True)
    assert checks.check_checkpoint_fidelity(e, torch.randn(5), stored, "w").status == "mismatch"
    assert checks.check_checkpoint_fidelity(e, torch.full((4,), float("nan")), stored, "w").status == "uninitialized"
    nan_stored = torch.tensor([1.0, float("nan")])
    assert checks.check_checkpoint_fidelity(entry(nan_stored), nan_stored.clone(), nan_stored, "w") is None


def test_missing_key():
    value = torch.full((3,), float("nan"))
    assert checks.check_missing_key(entry(value, persistent=True), value, None).status == "uninitialized"
    finding = checks.check_missing_key(entry(value, persistent=True), torch.zeros(3), None)
    assert finding.status == "unverifiable" and "initialized by code, not loaded" in finding.detail
    assert (
        checks.check_missing_key(entry(value, persistent=True), torch.zeros(3), torch.ones(3)).status
        == "uninitialized"
    )


def test_meta_leftover():
    meta = torch.empty(3, device="meta")
    assert checks.check_meta_leftover(entry(meta)).status == "on_meta"
    finding = checks.check_meta_leftover(
        entry(meta), offloaded="offloaded by accelerate but absent from its weights map"
    )
    assert finding.status == "unverifiable" and "absent from its weights map" in finding.detail
    assert checks.check_meta_leftover(entry(torch.zeros(3))) is None


def test_failing_statuses():
    assert {s.value for s in FAILING_STATUSES} == {"uninitialized", "mismatch", "on_meta", "overwritten", "crashed"}
    assert not is_failing("unverifiable") and not is_failing("ok")


def test_a_missing_key_transformers_reports_and_initialized_is_initialized_never_failing():
    value = torch.randn(4, 4)
    finding = checks.check_missing_key(entry(value, kind="parameter", persistent=True), value, None, reported=True)
    assert (
        finding.status == "initialized"
        and not finding.failing
        and "as transformers reports it newly initialized (missing_keys); not replayed" in finding.detail
    )
    # without transformers' word for it, the same tensor stays unverifiable (not initialized by request)
    assert (
        checks.check_missing_key(entry(value, kind="parameter", persistent=True), value, None).status == "unverifiable"
    )


def test_initialized_is_what_a_replay_saw_written_not_what_transformers_says():
    value = torch.randn(4, 4)
    e = entry(value, name="head.weight", kind="parameter", persistent=True)
    asked = frozenset({"head.weight"})
    seen = Replay(written={"head.weight": "modeling_x.py:12 (_init_weights)"}, ran=("head",), asked=asked)
    finding = checks.check_missing_key(e, value, None, reported=True, replay=seen)
    assert (
        finding.status == "initialized"
        and "written by weight initialization at modeling_x.py:12 (_init_weights)" in finding.detail
    )
    # reported as initialized, but the replay saw nothing write it: leftover memory that looks like values
    unseen = Replay(ran=("head", "Model"), asked=asked)
    finding = checks.check_missing_key(e, value, None, reported=True, replay=unseen)
    assert finding.status == "uninitialized" and finding.failing
    assert "transformers reports it newly initialized (missing_keys), but nothing wrote it" in finding.detail
    # without loading info, what the replay saw decides alone
    assert checks.check_missing_key(e, value, None, replay=seen).status == "initialized"
    assert checks.check_missing_key(e, value, None, replay=unseen).status == "uninitialized"
    # a replay that could not finish proves nothing either way: unverifiable, with why
    broken = Replay(ran=("head",), error="RuntimeError: boom", asked=asked)
    finding = checks.check_missing_key(e, value, None, reported=True, replay=broken)
    assert finding.status == "unverifiable" and "RuntimeError: boom" in finding.detail
    # a replaced tensor counts as written
    assert (
        checks.check_missing_key(
            e, value, None, replay=Replay(replaced=frozenset({"head.weight"}), asked=asked)
        ).status
        == "initialized"
    )
    # a tensor the replay did not watch (transformers flagged it loaded): no observation, transformers' word stands
    finding = checks.check_missing_key(
        e, value, None, reported=True, replay=Replay(ran=("head",), asked=frozenset({"other"}))
    )
    assert finding.status == "initialized" and finding.detail.endswith("not replayed")


def test_a_reported_missing_key_left_as_leftover_memory_still_fails():
    loaded = torch.full((4,), float("nan"))
    finding = checks.check_missing_key(entry(loaded, kind="parameter", persistent=True), loaded, None, reported=True)
    assert finding.status == "uninitialized" and finding.failing


def test_a_size_mismatch_ignored_on_request_is_initialized():
    loaded, stored = torch.randn(5, 4), torch.randn(2, 4)
    finding = checks.check_checkpoint_fidelity(
        entry(loaded, name="score.weight", kind="parameter", persistent=True),
        loaded,
        stored,
        "score.weight",
        resized=True,
    )
    assert (
        finding.status == "initialized"
        and not finding.failing
        and "ignore_mismatched_sizes" in finding.detail
        and "(2, 4)" in finding.detail
    )
    # re-initialized on request only if something re-initialized it
    e = entry(loaded, name="score.weight", kind="parameter", persistent=True)
    asked = frozenset({"score.weight"})
    assert (
        checks.check_checkpoint_fidelity(
            e, loaded, stored, "score.weight", resized=True, replay=Replay(ran=("score",), asked=asked)
        ).status
        == "uninitialized"
    )
    seen = Replay(written={"score.weight": ""}, asked=asked)
    assert (
        checks.check_checkpoint_fidelity(e, loaded, stored, "score.weight", resized=True, replay=seen).status
        == "initialized"
    )
    poisoned = torch.full((5, 4), float("nan"))
    assert (
        checks.check_checkpoint_fidelity(
            entry(poisoned, kind="parameter", persistent=True), poisoned, stored, "k", resized=True
        ).status
        == "uninitialized"
    )
    # a shape that differs with no request behind it is a mismatch
    assert (
        checks.check_checkpoint_fidelity(entry(loaded, kind="parameter", persistent=True), loaded, stored, "k").status
        == "mismatch"
    )


def _garbage_counted(tensor):
    """What checks.garbage said before its one-pass shortcut: every count made exactly (the property below holds the
    shortcut to it)."""
    if tensor.numel() == 0 or tensor.dtype == torch.bool:
        return None
    if tensor.dtype.is_floating_point:
        for count, what in (
            (torch.isnan(tensor).sum(), "are NaN"),
            (torch.isinf(tensor).sum(), "are infinite"),
            ((tensor.abs() > 1e30).sum(), "exceed 1e+30 in magnitude"),
        ):
            if int(count):
                return f"{int(count)} of {tensor.numel()} values {what}"
        return None
    top = torch.iinfo(tensor.dtype).max
    count = int((tensor == top).sum())
    return f"{count} of {tensor.numel()} values are the integer maximum {top}" if count else None


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32]),
    size=st.integers(1, 300),
    planted=st.lists(
        st.tuples(st.integers(0, 299), st.sampled_from(["nan", "inf", "-inf", "huge", "-huge", "top", "big"])),
        max_size=4,
    ),
)
def test_garbage_shortcut_says_what_exact_counting_says(dtype, size, planted):
    """The one-pass test (a finite sum, then the extremes) never hides garbage and never invents it: float16 values
    whose sum overflows, a NaN beside an infinity, INT_MAX among integers, all give the exact counts' answer."""
    tensor = torch.arange(size, dtype=torch.float64).to(dtype)
    for index, kind in planted:
        if index >= size:
            continue
        if dtype.is_floating_point:
            value = {
                "nan": float("nan"),
                "inf": float("inf"),
                "-inf": float("-inf"),
                "huge": 1e37,
                "-huge": -1e37,
                "top": 3e38,
                "big": float(torch.finfo(dtype).max),
            }[kind]
            tensor[index] = torch.tensor(value, dtype=torch.float64).to(dtype)
        else:
            tensor[index] = torch.iinfo(dtype).max if kind in ("top", "inf") else -5
    assert garbage(tensor) == _garbage_counted(tensor)


def test_a_large_uninitialized_mask_is_counted_and_its_difference_is_the_false_values():
    """A 2048x2048 causal mask left all True: one finding whose difference is the count of values the code makes
    False, counted without a bool sum (which widens to int64)."""
    mask = torch.tril(torch.ones(2048, 2048, dtype=torch.bool))
    finding = checks.check_non_persistent_buffer(entry(mask), torch.ones_like(mask), mask, None)
    false = 2048 * 2047 // 2
    assert (
        finding.status == "uninitialized"
        and finding.detail == f"all {2048 * 2048} values are True; the code computes {false} False"
    )
    assert finding.max_abs_diff == false
    other = mask.clone()
    other[0, 0] = False
    mismatch = checks.check_non_persistent_buffer(entry(mask), other, mask, None)
    assert (
        mismatch.status == "mismatch"
        and mismatch.detail == f"1 of {2048 * 2048} values differ"
        and mismatch.max_abs_diff == 1
    )


def test_a_difference_is_not_computed_where_the_values_are_not_finite_but_is_for_absurd_ones():
    expected = torch.linspace(1, 2, 8)
    infinite = checks.check_non_persistent_buffer(entry(expected), torch.full((8,), float("inf")), expected, None)
    assert (
        infinite.status == "uninitialized"
        and "8 of 8 values are infinite" in infinite.detail
        and infinite.max_abs_diff is None
    )
    absurd = checks.check_non_persistent_buffer(entry(expected), torch.full((8,), 1e37), expected, None)
    assert absurd.status == "uninitialized" and absurd.max_abs_diff is not None and absurd.max_abs_diff > 9e36
