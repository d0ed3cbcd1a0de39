"""An engine's own test suite, as it is written before anyone thinks of loadguard: its reference runner loads the Hugging
Face model with a plain ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)``, its processor with
``AutoProcessor``, and generates greedily with log-probs; the engine's outputs are compared against it.

Nothing here calls loadguard to load: the plugin sees these loads through transformers' own entry points. The one
loadguard line of the suite is its module marker (``test_reference_vs_engine.py``), which lets code written for
transformers 4 import on transformers 5. The engine is played by the same checkpoint built eagerly (what an engine
computes when it implements the model correctly).
"""

from __future__ import annotations

import functools

import pytest
import torch

from loadguard import zoo

IMAGE_SIZES = {"small": (24, 40), "large": (64, 48)}  # the large one is sliced by the image processor
PROMPTS = {
    "single": "(<image>./</image>) describe what you see .",
    "multi": "(<image>./</image>) (<image>./</image>) what do you see ?",
}
MAX_TOKENS = 6
NUM_LOGPROBS = 5


class ReferenceRunner:
    """The engine suite's own Hugging Face runner (the shape of vLLM's ``HfRunner``): config, model, processor, each
    through its auto class, and greedy generation with the top-k log-probs of every generated token."""

    def __init__(self, path, *, auto_cls=None, dtype=torch.float32):
        from transformers import AutoConfig, AutoModelForCausalLM, AutoProcessor

        self.config = AutoConfig.from_pretrained(path, trust_remote_code=True)
        self.model = (auto_cls or AutoModelForCausalLM).from_pretrained(path, trust_remote_code=True, dtype=dtype)
        self.model.eval()
        self.processor = AutoProcessor.from_pretrained(path, trust_remote_code=True)
        patch_minicpmv_runner(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        del self.model

    def generate_greedy_logprobs_limit(self, prompts, max_tokens, num_logprobs, images):
        outputs = []
        for prompt, prompt_images in zip(prompts, images):
            inputs = self.processor(text=prompt, images=list(prompt_images), return_tensors="pt")
            with torch.no_grad():
                out = self.model.generate(
                    **inputs,
                    do_sample=False,
                    max_new_tokens=max_tokens,
                    output_scores=True,
                    return_dict_in_generate=True,
                )
            steps = len(out.scores)
            ids = out.sequences[0, out.sequences.shape[1] - steps :].tolist()  # generate from embeddings: new ids only
            logprobs = []
            for scores in out.scores:
                top = torch.topk(torch.log_softmax(scores[0].float(), dim=-1), num_logprobs)
                logprobs.append(dict(zip(top.indices.tolist(), top.values.tolist())))
            outputs.append((ids, self.processor.tokenizer.decode(ids, skip_special_tokens=True), logprobs))
        return outputs


def patch_minicpmv_runner(runner):
    """The per-model runner patch engine suites keep for MiniCPM-V: its ``generate`` finds its terminators with the
    tokenizer it is handed, decodes text unless told not to, and must not see the processor's ``image_sizes``."""
    original = runner.model.generate

    @functools.wraps(original)
    def generate(*args, image_sizes=None, **kwargs):
        return original(*args, tokenizer=runner.processor.tokenizer, decode_text=False, **kwargs)

    runner.model.generate = generate
    return runner


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    return zoo.build("minicpmv_like", tmp_path_factory.mktemp("minicpmv_like") / "model")


@pytest.fixture(scope="session")
def engine(model_path):
    """The engine's outputs: the same checkpoint built eagerly, generated with the same runner code."""
    from transformers import AutoProcessor

    from loadguard.runner import eager_load

    runner = ReferenceRunner.__new__(ReferenceRunner)
    runner.model = eager_load(model_path, trust_remote_code=True, workarounds="auto").eval()
    runner.processor = AutoProcessor.from_pretrained(model_path, trust_remote_code=True)
    patch_minicpmv_runner(runner)
    return lambda prompts, images: runner.generate_greedy_logprobs_limit(prompts, MAX_TOKENS, NUM_LOGPROBS, images)


def case(size: str, kind: str):
    width, height = IMAGE_SIZES[size]
    count = PROMPTS[kind].count("<image>")
    return [PROMPTS[kind]], [zoo.demo_images([(width, height)] * count)]
