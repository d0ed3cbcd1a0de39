"""HfRunner, the eager twin and the differential compare on the zoo VLM; embeddings from a real checkpoint."""

from __future__ import annotations

import pytest
import torch

import loadguard
from loadguard.compare import check_logprobs_close, check_outputs_equal
from loadguard.errors import BrokenModelError, InvalidOptionError
from loadguard.runner import HfRunner, default_cases, eager_load

from .conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


@pytest.fixture(scope="module")
def cases(zoo_folder):
    return default_cases(zoo_folder("minicpmv_like"))


@pytest.fixture(scope="module")
def eager_outputs(zoo_folder, cases):
    from transformers import AutoProcessor

    folder = zoo_folder("minicpmv_like")
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    twin = eager_load(folder, trust_remote_code=True, workarounds="auto")
    prompts, images = cases
    return HfRunner.from_model(twin, processor).generate_greedy_logprobs_limit(prompts, 8, 5, images=images)


def test_default_cases_cover_sizes_and_multi_image(cases):
    prompts, images = cases
    assert len(prompts) == len(images) == 4
    assert sorted(len(i) for i in images) == [1, 1, 1, 2]


def test_eager_twin_equals_the_model_as_built(zoo_folder):
    from loadguard import zoo

    twin = eager_load(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto")
    truth = zoo.build_model("minicpmv_like")
    for (name, got), (_, want) in zip(twin.state_dict().items(), truth.state_dict().items()):
        assert torch.equal(got, want), name
    assert torch.equal(twin.resampler.pos_embed, truth.resampler.pos_embed)


@needs_v5
def test_broken_reference_fails_against_eager_deterministically(zoo_folder, cases, eager_outputs):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", audit="off", poison=True) as hf:
        assert hf.report is None
        broken = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
    assert all(text == "!!!!!!!!" for _, text, _ in broken)
    with pytest.raises(AssertionError, match="non-finite logprob"):
        check_logprobs_close(outputs_0_lst=broken, outputs_1_lst=eager_outputs, name_0="hf", name_1="eager")


@needs_v5
def test_repair_policy_makes_the_reference_agree(zoo_folder, cases, eager_outputs):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", poison=True) as hf:
        assert not hf.report.ok and hf.repair.ok
        outputs = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
        greedy = hf.generate_greedy(prompts, 8, images=images)
    assert hf.model is None  # freed on exit
    result = check_logprobs_close(outputs_0_lst=outputs, outputs_1_lst=eager_outputs, name_0="hf", name_1="eager", check_lengths=True)
    assert result.ok and all(p.divergence is None for p in result.prompts)
    check_outputs_equal(outputs_0_lst=greedy, outputs_1_lst=[(i, t) for i, t, _ in eager_outputs], name_0="hf", name_1="eager")


def test_fixed_variant_agrees_without_repair(zoo_folder, cases, eager_outputs):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds="auto", audit="raise") as hf:
        assert hf.report.ok and hf.repair is None
        outputs = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
    check_logprobs_close(outputs_0_lst=outputs, outputs_1_lst=eager_outputs, name_0="fixed", name_1="eager", check_lengths=True)


def test_logprobs_are_float32_log_softmax_of_hidden_times_embedding(zoo_folder, cases):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds="auto") as hf:
        ids, text, steps = hf.generate_greedy_logprobs_limit(prompts[:1], 3, 4, images=images[:1])[0]
        inputs = hf._inputs(prompts[0], images[0])
        inputs.pop("image_sizes")
        with torch.no_grad():  # MiniCPM-V's forward takes the processor's output as one dict
            logits = hf.model(inputs).logits[0, -1].float()
    expected = torch.log_softmax(logits, -1)
    assert len(steps) == 3 and len(steps[0]) == 4
    assert max(steps[0], key=steps[0].get) == ids[0]
    for token, value in steps[0].items():
        assert abs(value - float(expected[token])) < 1e-4


@needs_v5
def test_raise_policy_and_patches(zoo_folder):
    with pytest.raises(BrokenModelError, match="resampler.pos_embed"):
        HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", audit="raise", poison=True)
    seen = []

    def patch(runner):
        seen.append(runner.report.ok)
        runner.patched = True
        return runner

    with HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", poison=True, patches=[patch]) as hf:
        assert hf.patched and seen == [False]
    with pytest.raises(TypeError, match="must return the runner"):
        HfRunner(zoo_folder("clean"), trust_remote_code=True, patches=[lambda r: None])
    with pytest.raises(InvalidOptionError):
        HfRunner(zoo_folder("clean"), trust_remote_code=True, audit="sometimes")


def test_text_model_generate(zoo_folder):
    with HfRunner(zoo_folder("clean"), trust_remote_code=True) as hf:
        (ids, text), = hf.generate_greedy(["describe what you see ."], 5)
        assert len(ids) == 5 and isinstance(text, str)
        with pytest.raises(InvalidOptionError, match="no image processor"):
            hf.generate_greedy(["x"], 2, images=[[object()]])


def test_minilm_embeddings_rank_a_paraphrase_first(minilm_folder):
    with HfRunner(minilm_folder) as hf:
        assert hf.report.ok
        anchor, paraphrase, unrelated = torch.tensor(
            hf.encode(["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."])
        )
    assert float(anchor @ paraphrase) > 0.7 > float(anchor @ unrelated) + 0.5
    assert abs(float(anchor.norm()) - 1.0) < 1e-5


@needs_v5
def test_trace_names_the_resampler(zoo_folder, cases):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", audit="off", poison=True) as hf:
        result = loadguard.trace(hf.model, run=lambda: hf.generate_greedy(prompts[:1], 1, images=images[:1]))
    assert result.module == "resampler.attn" and result.module_class == "MultiheadAttention"
    assert result.tensors == ("resampler.pos_embed",) and result.inputs
    assert "resampler.pos_embed" in result.describe()


def test_trace_of_a_healthy_model_is_finite(zoo_folder, cases):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds="auto") as hf:
        result = loadguard.trace(hf.model, run=lambda: hf.generate_greedy(prompts[:1], 1, images=images[:1]))
    assert result.finite and result.modules_run > 10 and result.to_dict()["module"] is None
