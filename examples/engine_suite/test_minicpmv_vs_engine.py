"""Six cases, as in the suite where the bug surfaced: three image sizes x single- and multi-image prompts.

pytest examples/engine_suite                               # flaky or failing, without saying why
pytest examples/engine_suite --loadguard-poison            # fails the same way every run
pytest examples/engine_suite --loadguard=fail              # fails, naming resampler.pos_embed and the fix
                                                           # (a load that by chance got a freed copy of the
                                                           # right table is clean, and passes: add poison)
pytest examples/engine_suite --loadguard=repair            # passes
loadguard repeat -n 20 -- examples/engine_suite            # pass rate and fingerprints per case
"""

from __future__ import annotations

import pytest
from conftest import IMPORT_WORKAROUNDS, MAX_TOKENS, NUM_LOGPROBS, case

from loadguard.compare import check_logprobs_close

# the model's code was written for transformers 4: these let it import and construct on transformers 5
pytestmark = pytest.mark.loadguard(workarounds=IMPORT_WORKAROUNDS)


@pytest.mark.parametrize("kind", ["single", "multi"])
@pytest.mark.parametrize("size", ["small", "medium", "large"])
def test_hf_reference_matches_engine(hf_runner, model_path, engine, size, kind):
    prompts, images = case(size, kind)
    with hf_runner(model_path, trust_remote_code=True) as hf:
        hf_outputs = hf.generate_greedy_logprobs_limit(prompts, MAX_TOKENS, NUM_LOGPROBS, images=images)
    check_logprobs_close(
        outputs_0_lst=hf_outputs,
        outputs_1_lst=engine(prompts, images),
        name_0="hf",
        name_1="engine",
        check_lengths=True,
    )
