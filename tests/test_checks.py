"""Every check has a positive and a negative case, on hand-made tensors."""

from __future__ import annotations

import torch

from loadguard import checks
from loadguard._replay import Replay
from loadguard.inventory import TensorEntry


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
    assert checks.check_non_persistent_buffer(entry(expected), torch.zeros(8), expected, None).status == "uninitialized"
    assert checks.check_non_persistent_buffer(entry(expected), torch.full((8,), 1e37), expected, None).status == "uninitialized"


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
    assert checks.check_non_persistent_buffer(entry(loaded_bf16), (expected * 1.1).to(torch.bfloat16), expected, None) is not None
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
    assert checks.check_missing_key(entry(value, persistent=True), torch.zeros(3), torch.ones(3)).status == "uninitialized"


def test_meta_leftover():
    meta = torch.empty(3, device="meta")
    assert checks.check_meta_leftover(entry(meta)).status == "on_meta"
    finding = checks.check_meta_leftover(entry(meta), offloaded="offloaded by accelerate but absent from its weights map")
    assert finding.status == "unverifiable" and "absent from its weights map" in finding.detail
    assert checks.check_meta_leftover(entry(torch.zeros(3))) is None


def test_failing_statuses():
    assert {s.value for s in checks.FAILING_STATUSES} == {"uninitialized", "mismatch", "on_meta", "overwritten"}
    assert not checks.is_failing("unverifiable") and not checks.is_failing("ok")


def test_a_missing_key_transformers_reports_and_initialized_is_initialized_never_failing():
    value = torch.randn(4, 4)
    finding = checks.check_missing_key(entry(value, kind="parameter", persistent=True), value, None, reported=True)
    assert finding.status == "initialized" and not finding.failing and "as transformers reports it newly initialized (missing_keys); not replayed" in finding.detail
    # without transformers' word for it, the same tensor stays unverifiable (not initialized by request)
    assert checks.check_missing_key(entry(value, kind="parameter", persistent=True), value, None).status == "unverifiable"


def test_initialized_is_what_a_replay_saw_written_not_what_transformers_says():
    value = torch.randn(4, 4)
    e = entry(value, name="head.weight", kind="parameter", persistent=True)
    asked = frozenset({"head.weight"})
    seen = Replay(written={"head.weight": "modeling_x.py:12 (_init_weights)"}, ran=("head",), asked=asked)
    finding = checks.check_missing_key(e, value, None, reported=True, replay=seen)
    assert finding.status == "initialized" and "written by weight initialization at modeling_x.py:12 (_init_weights)" in finding.detail
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
    assert checks.check_missing_key(e, value, None, replay=Replay(replaced=frozenset({"head.weight"}), asked=asked)).status == "initialized"
    # a tensor the replay did not watch (transformers flagged it loaded): no observation, transformers' word stands
    finding = checks.check_missing_key(e, value, None, reported=True, replay=Replay(ran=("head",), asked=frozenset({"other"})))
    assert finding.status == "initialized" and finding.detail.endswith("not replayed")


def test_a_reported_missing_key_left_as_leftover_memory_still_fails():
    loaded = torch.full((4,), float("nan"))
    finding = checks.check_missing_key(entry(loaded, kind="parameter", persistent=True), loaded, None, reported=True)
    assert finding.status == "uninitialized" and finding.failing


def test_a_size_mismatch_ignored_on_request_is_initialized():
    loaded, stored = torch.randn(5, 4), torch.randn(2, 4)
    finding = checks.check_checkpoint_fidelity(entry(loaded, name="score.weight", kind="parameter", persistent=True), loaded, stored, "score.weight", resized=True)
    assert finding.status == "initialized" and not finding.failing and "ignore_mismatched_sizes" in finding.detail and "(2, 4)" in finding.detail
    # re-initialized on request only if something re-initialized it
    e = entry(loaded, name="score.weight", kind="parameter", persistent=True)
    asked = frozenset({"score.weight"})
    assert checks.check_checkpoint_fidelity(e, loaded, stored, "score.weight", resized=True, replay=Replay(ran=("score",), asked=asked)).status == "uninitialized"
    seen = Replay(written={"score.weight": ""}, asked=asked)
    assert checks.check_checkpoint_fidelity(e, loaded, stored, "score.weight", resized=True, replay=seen).status == "initialized"
    poisoned = torch.full((5, 4), float("nan"))
    assert checks.check_checkpoint_fidelity(entry(poisoned, kind="parameter", persistent=True), poisoned, stored, "k", resized=True).status == "uninitialized"
    # a shape that differs with no request behind it is a mismatch
    assert checks.check_checkpoint_fidelity(entry(loaded, kind="parameter", persistent=True), loaded, stored, "k").status == "mismatch"
