"""The engine against its Hugging Face reference, loaded by the suite's own runner (``conftest.ReferenceRunner``).

pytest examples/engine_own_runner                        # flaky or failing, without saying why
pytest examples/engine_own_runner --loadguard=fail       # fails at the load, naming resampler.pos_embed, the in-memory
                                                         # repair and the `loadguard fix` command that fixes the model
pytest examples/engine_own_runner --loadguard=repair     # passes
pytest examples/engine_own_runner --loadguard=repair -n 2
loadguard repeat -n 5 -- examples/engine_own_runner --loadguard=repair
"""

from __future__ import annotations

import pytest
from conftest import MAX_TOKENS, NUM_LOGPROBS, ReferenceRunner, case

from loadguard.compare import check_logprobs_close

# the model's code was written for transformers 4: "auto" applies, around every load of these tests (the auto classes'
# import of the remote code included), each workaround whose failure the load meets
pytestmark = pytest.mark.loadguard(workarounds="auto")


@pytest.mark.parametrize("kind", ["single", "multi"])
@pytest.mark.parametrize("size", ["small", "large"])
def test_reference_matches_engine(model_path, engine, size, kind):
    prompts, images = case(size, kind)
    with ReferenceRunner(model_path) as hf:
        hf_outputs = hf.generate_greedy_logprobs_limit(prompts, MAX_TOKENS, NUM_LOGPROBS, images)
    check_logprobs_close(
        outputs_0_lst=hf_outputs,
        outputs_1_lst=engine(prompts, images),
        name_0="hf",
        name_1="engine",
        check_lengths=True,
    )
