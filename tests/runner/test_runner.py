"""HfRunner, the eager twin and the differential compare on the zoo VLM; embeddings from a real checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

import loadguard
from loadguard.compare import check_logprobs_close, check_outputs_equal
from loadguard.errors import BrokenModelError, InvalidOptionError
from loadguard.runner import HfRunner, default_cases, eager_load

from ..conftest import IS_V5, TRANSFORMERS_VERSION

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
    with HfRunner(
        zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", audit="off", poison=True
    ) as hf:
        assert hf.report is None
        broken = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
    assert all(text == "!!!!!!!!" for _, text, _ in broken)
    with pytest.raises(AssertionError, match="non-finite logprob"):
        check_logprobs_close(outputs_0_lst=broken, outputs_1_lst=eager_outputs, name_0="hf", name_1="eager")


@needs_v5
def test_repair_policy_makes_the_reference_agree(zoo_folder, cases, eager_outputs):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", poison=True) as hf:
        assert hf.report.ok and not hf.report_as_loaded.ok and hf.repair.ok  # the report describes the model it holds
        outputs = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
        greedy = hf.generate_greedy(prompts, 8, images=images)
    assert hf.model is None  # freed on exit
    result = check_logprobs_close(
        outputs_0_lst=outputs, outputs_1_lst=eager_outputs, name_0="hf", name_1="eager", check_lengths=True
    )
    assert result.ok and all(p.divergence is None for p in result.prompts)
    check_outputs_equal(
        outputs_0_lst=greedy, outputs_1_lst=[(i, t) for i, t, _ in eager_outputs], name_0="hf", name_1="eager"
    )


def test_fixed_variant_agrees_without_repair(zoo_folder, cases, eager_outputs):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds="auto", audit="raise") as hf:
        assert hf.report.ok and hf.repair is None
        outputs = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
    check_logprobs_close(
        outputs_0_lst=outputs, outputs_1_lst=eager_outputs, name_0="fixed", name_1="eager", check_lengths=True
    )


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
        seen.append(runner.report_as_loaded.ok)
        runner.patched = True
        return runner

    with HfRunner(
        zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", poison=True, patches=[patch]
    ) as hf:
        assert hf.patched and seen == [False]
    with pytest.raises(TypeError, match="must return the runner"):
        HfRunner(zoo_folder("clean"), trust_remote_code=True, patches=[lambda r: None])
    with pytest.raises(InvalidOptionError):
        HfRunner(zoo_folder("clean"), trust_remote_code=True, audit="sometimes")


def test_text_model_generate(zoo_folder):
    with HfRunner(zoo_folder("clean"), trust_remote_code=True) as hf:
        ((ids, text),) = hf.generate_greedy(["describe what you see ."], 5)
        assert len(ids) == 5 and isinstance(text, str)
        with pytest.raises(InvalidOptionError, match="no image processor"):
            hf.generate_greedy(["x"], 2, images=[[object()]])


def test_minilm_embeddings_rank_a_paraphrase_first(minilm_folder):
    with HfRunner(minilm_folder) as hf:
        assert hf.report.ok
        anchor, paraphrase, unrelated = torch.tensor(
            hf.encode(
                ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."]
            )
        )
    assert float(anchor @ paraphrase) > 0.7 > float(anchor @ unrelated) + 0.5
    assert abs(float(anchor.norm()) - 1.0) < 1e-5


@needs_v5
def test_trace_names_the_resampler(zoo_folder, cases):
    prompts, images = cases
    with HfRunner(
        zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto", audit="off", poison=True
    ) as hf:
        result = loadguard.trace(hf.model, run=lambda: hf.generate_greedy(prompts[:1], 1, images=images[:1]))
    assert result.module == "resampler.attn" and result.module_class == "MultiheadAttention"
    assert result.tensors == ("resampler.pos_embed",) and result.inputs
    assert "resampler.pos_embed" in result.describe()


def test_trace_of_a_healthy_model_is_finite(zoo_folder, cases):
    prompts, images = cases
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds="auto") as hf:
        result = loadguard.trace(hf.model, run=lambda: hf.generate_greedy(prompts[:1], 1, images=images[:1]))
    assert result.finite and result.modules_run > 10 and result.to_dict()["module"] is None


SEED_SIZES = {"small": (24, 40), "medium": (32, 32), "large": (64, 48)}  # the example suite's; large is sliced
SEED_PROMPTS = {
    "single": "(<image>./</image>) describe what you see .",
    "multi": "(<image>./</image>) (<image>./</image>) what do you see ?",
}


def seed_cases():
    from loadguard.zoo import demo_images

    prompts, images = [], []
    for size in SEED_SIZES.values():
        for prompt in SEED_PROMPTS.values():
            prompts.append(prompt)
            images.append(demo_images([size] * prompt.count("<image>")))
    return prompts, images


@needs_v5
def test_done_when_the_six_seed_cases_run_through_the_runner(zoo_folder):
    """3 image sizes x single/multi image on the MiniCPM-V-2.6-faithful model: the generated ids are exactly the
    new tokens and each step's argmax; three fresh loads agree; the load repaired by loadguard equals the model
    fixed through its own _set_2d_pos_cache; without the audit, under poison, it is NaN."""
    folder = zoo_folder("minicpmv_like")
    prompts, images = seed_cases()
    runs = []
    for _ in range(3):
        with HfRunner(folder, trust_remote_code=True, workarounds="auto") as hf:
            outputs = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
            greedy = hf.generate_greedy(prompts, 8, images=images)
            # the model's own generate, as MiniCPM-V 2.6 is called: new tokens only, and each one its step's argmax
            inputs = hf._inputs(prompts[4], images[4])
            inputs.pop("image_sizes")
            raw = hf.model.generate(
                **inputs, max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True
            )
        assert raw.sequences[0].tolist() == outputs[4][0]
        assert [int(s[0].argmax()) for s in raw.scores] == outputs[4][0]
        assert [ids for ids, _ in greedy] == [ids for ids, _, _ in outputs]
        assert all(len(ids) == 8 and len(steps) == 8 for ids, _, steps in outputs)
        assert all(max(step, key=step.get) == token for ids, _, steps in outputs for token, step in zip(ids, steps))
        assert all(math.isfinite(v) for _, _, steps in outputs for step in steps for v in step.values())
        runs.append(outputs)
    assert runs[0] == runs[1] == runs[2]
    with HfRunner(folder, trust_remote_code=True, audit="off", workarounds=["auto", "minicpmv-pos-cache"]) as own_fix:
        assert [(w.name, w.status) for w in own_fix.workarounds if w.stage == "after_load"] == [
            ("minicpmv-pos-cache", "applied")
        ]
        fixed = own_fix.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
    for (ids, text, steps), (want_ids, want_text, want_steps) in zip(runs[0], fixed):
        assert ids == want_ids and text == want_text
        for step, want in zip(steps, want_steps):
            assert step.keys() == want.keys() and all(abs(step[k] - want[k]) <= 1e-5 for k in step)
    with HfRunner(folder, trust_remote_code=True, audit="off", poison=True, workarounds="auto") as broken:
        garbage = broken.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
    assert all(text == "!!!!!!!!" and ids == [0] * 8 for ids, text, _ in garbage)
    assert all(not math.isfinite(v) for _, _, steps in garbage for step in steps for v in step.values())


def test_runner_cuts_new_tokens_from_either_kind_of_generate():
    from loadguard.runner._outputs import new_tokens

    prompt = torch.tensor([[5, 6, 7]])
    assert new_tokens(torch.tensor([[5, 6, 7, 9, 9]]), prompt, 2) == [9, 9]  # prompt + new
    assert new_tokens(torch.tensor([[9, 8]]), prompt, 2) == [9, 8]  # new only (generate from inputs_embeds)
    assert new_tokens(torch.tensor([[1, 2, 3, 4, 9, 8]]), prompt, 2) == [9, 8]  # longer than max_new_tokens: the tail


def test_a_generate_that_contradicts_its_scores_is_an_error(zoo_folder):
    from loadguard.errors import RunnerConsistencyError

    with HfRunner(zoo_folder("clean"), trust_remote_code=True) as hf:
        original = hf.model.generate

        def shifted(*args, **kwargs):  # a post-processing generate: returns tokens that are not its argmax
            output = original(*args, **kwargs)
            output.sequences[:, -1] = (output.sequences[:, -1] + 1) % hf.model.config.vocab_size
            return output

        hf.model.generate = shifted
        with pytest.raises(
            RunnerConsistencyError, match="step 2 generated token .* but the argmax of that step's scores is"
        ):
            hf.generate_greedy(["describe what you see ."], 3)


def _eager_only_model():
    """Code written for eager attention only: it indexes the attention weights, which SDPA does not return."""
    from torch import nn
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutput

    class EagerOnlyConfig(PretrainedConfig):
        model_type = "lgeageronly"

    class EagerOnly(PreTrainedModel, GenerationMixin):
        config_class = EagerOnlyConfig
        _supports_sdpa = True

        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(64, 8)
            self.head = nn.Linear(8, 64)
            self.post_init()

        def forward(self, input_ids, attention_mask=None, **kwargs):
            weights = torch.ones(input_ids.shape[-1]) if self.config._attn_implementation == "eager" else None
            return CausalLMOutput(logits=self.head(self.embed(input_ids) * weights[0]))

    torch.manual_seed(0)
    return EagerOnly(
        EagerOnlyConfig(
            vocab_size=64,
            num_hidden_layers=1,
            hidden_size=8,
            num_attention_heads=1,
            use_cache=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
    )


def test_code_that_runs_only_with_eager_attention_is_told_so(zoo_folder):
    from transformers import AutoTokenizer

    from loadguard.errors import EagerAttentionNeededError, hint_for

    model = _eager_only_model()
    assert model.config._attn_implementation == "sdpa"
    runner = HfRunner.from_model(
        model, tokenizer=AutoTokenizer.from_pretrained(zoo_folder("clean"), trust_remote_code=True)
    )
    with pytest.raises(EagerAttentionNeededError) as info:
        runner.generate_greedy(["describe what you see ."], 2)
    message = info.value.message
    assert "fails under attn_implementation='sdpa' (TypeError: 'NoneType' object is not subscriptable)" in message
    assert "runs with attn_implementation='eager'" in message
    assert hint_for(info.value, "cli").startswith("run again with --attn-implementation eager")
    assert 'attn_implementation="eager"' in hint_for(info.value, "api")
    assert model.config._attn_implementation == "sdpa"  # the retry's kernel is put back
    # with eager attention it runs
    model.set_attn_implementation("eager")
    ((ids, _),) = runner.generate_greedy(["describe what you see ."], 2)
    assert len(ids) == 2


def test_a_failure_that_eager_attention_does_not_fix_is_reported_as_it_was(zoo_folder):
    from transformers import AutoTokenizer

    model = _eager_only_model()
    model.forward = lambda *a, **k: (_ for _ in ()).throw(IndexError("index 99 is out of bounds"))
    runner = HfRunner.from_model(
        model, tokenizer=AutoTokenizer.from_pretrained(zoo_folder("clean"), trust_remote_code=True)
    )
    with pytest.raises(IndexError, match="index 99"):
        runner.generate_greedy(["describe what you see ."], 2)
