"""Comparator semantics on hand-written cases (compatible quirks and the fixes behind options), plus
properties (hypothesis)."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadguard.compare import check_logprobs_close, check_outputs_equal


def lp(**scores):
    return {int(k[1:]): v for k, v in scores.items()}


def out(ids, steps, text=None):
    return (ids, text if text is not None else " ".join(map(str, ids)), steps)


def run(a, b, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_logprobs_close(outputs_0_lst=[a], outputs_1_lst=[b], name_0="hf", name_1="engine", **kw)


STEPS = [lp(t1=-0.1, t2=-2.5), lp(t2=-0.2, t3=-1.9), lp(t3=-0.3, t4=-1.4), lp(t4=-0.5, t5=-0.9)]


def test_outputs_equal_passes_and_fails_with_a_diff():
    result = check_outputs_equal(
        outputs_0_lst=[([1, 2, 3], "a b c")], outputs_1_lst=[([1, 2, 3], "a b c")], name_0="hf", name_1="engine"
    )
    assert result.ok and result.prompts[0].matched_prefix == 3 and result.prompts[0].divergence is None
    with pytest.raises(AssertionError) as info:
        check_outputs_equal(
            outputs_0_lst=[([1, 2, 3], "a b c")], outputs_1_lst=[([1, 2, 4], "a b d")], name_0="hf", name_1="engine"
        )
    assert "Test0: outputs differ at token 2 (matched 2 tokens)" in str(info.value)
    assert "hf: ids [1, 2, [3]]" in str(info.value) and "engine: ids [1, 2, [4]]" in str(info.value)


def test_identical_outputs_pass():
    result = run(out([1, 2, 3, 4], STEPS), out([1, 2, 3, 4], STEPS))
    assert result.ok and result.prompts[0].matched_prefix == 4 and result.prompts[0].divergence is None


def test_divergence_within_top_k_passes_and_stops():
    # at position 1: hf chose 2, engine chose 3; each is in the other's top-2; later tokens are not compared
    a = out([1, 2, 9, 9], STEPS)
    b = out([1, 3, 7, 7], [STEPS[0], lp(t3=-0.1, t2=-0.3), {}, {}])
    result = run(a, b)
    prompt = result.prompts[0]
    assert result.ok and prompt.divergence == 1 and prompt.tokens == (2, 3) and prompt.matched_prefix == 1
    with pytest.warns(UserWarning, match="at position 1: hf chose 2, engine chose 3"):
        check_logprobs_close(outputs_0_lst=[a], outputs_1_lst=[b], name_0="hf", name_1="engine")


def test_divergence_outside_top_k_fails_with_readable_message():
    a = out([1, 2], STEPS[:2])
    b = out([1, 5], [STEPS[0], lp(t5=-0.1, t6=-0.2)])
    with pytest.raises(AssertionError) as info:
        run(a, b)
    text = str(info.value)
    assert "at position 1: hf chose 2, engine chose 5" in text and "not in the other side's top" in text


def test_quirk_lengths_not_compared_unless_asked():
    a, b = out([1, 2, 3, 4], STEPS), out([1, 2], STEPS[:2])
    assert run(a, b).ok
    with pytest.raises(AssertionError, match="one is a prefix of the other"):
        run(a, b, check_lengths=True)


def test_quirk_text_only_difference_warns():
    a, b = out([1, 2], STEPS[:2], text="a b"), out([1, 2], STEPS[:2], text="a  b")
    with pytest.warns(UserWarning, match="same tokens, different text"):
        result = check_logprobs_close(outputs_0_lst=[a], outputs_1_lst=[b], name_0="hf", name_1="engine")
    assert result.ok


def test_quirk_always_check_logprobs_checks_position_zero_only():
    # position 2 has a token missing from the other side's logprobs; only check_all_positions sees it
    steps_b = [STEPS[0], STEPS[1], lp(t8=-0.1, t9=-0.2), STEPS[3]]
    a, b = out([1, 2, 3, 4], STEPS), out([1, 2, 3, 4], steps_b)
    assert run(a, b, always_check_logprobs=True).ok
    with pytest.raises(AssertionError, match="at position 2"):
        run(a, b, check_all_positions=True)


def test_near_tie_accepts_only_real_ties():
    tie_a = out([1, 4], [STEPS[0], lp(t4=-0.50, t5=-0.52)])
    tie_b = out([1, 5], [STEPS[0], lp(t5=-0.50, t4=-0.51)])
    result = run(tie_a, tie_b, near_tie=0.05)
    assert result.ok and "near tie at position 1" in result.prompts[0].warnings[0]
    far_a = out([1, 4], [STEPS[0], lp(t4=-0.1, t5=-3.0)])
    far_b = out([1, 5], [STEPS[0], lp(t5=-0.1, t4=-3.0)])
    assert run(far_a, far_b).ok  # compatible: both in top-2
    with pytest.raises(AssertionError, match="not a near tie"):
        run(far_a, far_b, near_tie=0.05)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_logprobs_always_fail(bad):
    steps = [lp(t0=bad, t1=bad)] * 2
    broken = out([0, 0], steps, text="!!")
    with pytest.raises(AssertionError, match="non-finite logprob"):
        run(broken, broken)  # even against itself


def test_skip_tokens_on_side_zero():
    a = out([7, 1, 2], [lp(t7=-0.1)] + STEPS[:2])
    b = out([1, 2], STEPS[:2])
    assert run(a, b, num_outputs_0_skip_tokens=1).prompts[0].matched_prefix == 2


token = st.integers(min_value=0, max_value=20)
logprob = st.floats(min_value=-20, max_value=0, allow_nan=False)


@st.composite
def outputs(draw):
    ids = draw(st.lists(token, min_size=1, max_size=8))
    steps = [{t: draw(logprob), **draw(st.dictionaries(token, logprob, max_size=3))} for t in ids]
    return out(ids, steps)


@given(outputs())
def test_property_an_output_always_matches_itself(o):
    result = run(o, o, check_lengths=True, check_all_positions=True, near_tie=0.0)
    assert result.ok and result.prompts[0].matched_prefix == len(o[0])


@given(outputs(), outputs())
def test_property_symmetric_verdict(a, b):
    def verdict(x, y):
        try:
            return run(x, y).ok
        except AssertionError:
            return False

    assert verdict(a, b) == verdict(b, a)


@given(outputs(), outputs())
def test_property_matched_prefix_is_the_common_prefix(a, b):
    try:
        result = run(a, b)
        prefix = result.prompts[0].matched_prefix
    except AssertionError as error:
        assert "Test0" in str(error)
        return
    common = 0
    for x, y in zip(a[0], b[0]):
        if x != y:
            break
        common += 1
    assert prefix == common


@given(outputs(), st.integers(min_value=0, max_value=7))
def test_property_nan_anywhere_fails(o, position):
    position = position % len(o[0])
    steps = [dict(s) for s in o[2]]
    steps[position][o[0][position]] = math.nan
    with pytest.raises(AssertionError, match="non-finite"):
        run(out(o[0], steps), o)
