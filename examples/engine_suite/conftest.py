"""An engine-style test suite: the Hugging Face reference (through ``hf_runner``) against an "engine".

The engine here is the eager twin of the same checkpoint (constructed normally on CPU, weights copied in):
what an inference engine computes when it implements the model correctly. The reference side is loaded
with ``from_pretrained`` like every engine suite does, so whatever transformers gets wrong shows up as a
mismatch between the two.

The model's code, like MiniCPM-V 2.6's, was written for transformers 4: the suite names the workarounds it
needs to import on transformers 5 (``IMPORT_WORKAROUNDS``), as engine suites patch their reference models.
"""

from __future__ import annotations

import pytest

from loadguard import zoo
from loadguard.runner import HfRunner, eager_load

# (width, height) of the images: three sizes, as in the suite where the MiniCPM-V bug surfaced; the large one
# is sliced by the image processor
IMAGE_SIZES = {"small": (24, 40), "medium": (32, 32), "large": (64, 48)}
PROMPTS = {
    "single": "(<image>./</image>) describe what you see .",
    "multi": "(<image>./</image>) (<image>./</image>) what do you see ?",
}
MAX_TOKENS = 8
NUM_LOGPROBS = 5
IMPORT_WORKAROUNDS = ["v4-attn-mask-utils", "remote-code-typing-aliases", "v4-tied-weights-keys"]


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    return zoo.build("minicpmv_like", tmp_path_factory.mktemp("minicpmv_like") / "model")


@pytest.fixture(scope="session")
def engine(model_path):
    """The engine's role: generate with the eager twin."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_path, trust_remote_code=True)
    runner = HfRunner.from_model(
        eager_load(model_path, trust_remote_code=True, workarounds=IMPORT_WORKAROUNDS), processor
    )

    def generate(prompts, images):
        return runner.generate_greedy_logprobs_limit(prompts, MAX_TOKENS, NUM_LOGPROBS, images=images)

    return generate


def case(size: str, kind: str):
    width, height = IMAGE_SIZES[size]
    count = PROMPTS[kind].count("<image>")
    return [PROMPTS[kind]], [zoo.demo_images([(width, height)] * count)]
