from __future__ import annotations

import pytest
import torch

import loadguard
from loadguard.errors import BrokenModelError, InvalidOptionError, ModelNotFoundError, RemoteCodeNotTrustedError

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


@needs_v5
def test_repair_policy_returns_a_repaired_model_with_its_report(zoo_folder):
    model = loadguard.load(
        "AutoModelForCausalLM", zoo_folder("minicpmv_like"), trust_remote_code=True, poison=True, workarounds="auto"
    )
    # one rule: the report describes the model you hold (repaired, saying so); what the load left keeps its own name
    assert (
        model.loadguard_report.ok
        and "repaired by loadguard.repair: resampler.pos_embed" in model.loadguard_report.method
    )
    assert [f.tensor for f in model.loadguard_report_as_loaded.failures] == ["resampler.pos_embed"]
    assert model.loadguard_report.workarounds == model.loadguard_report_as_loaded.workarounds != ()
    assert model.loadguard_repair.ok and model.loadguard_repair.repaired == ("resampler.pos_embed",)
    assert not torch.isnan(model.resampler.pos_embed).any()


@needs_v5
def test_raise_policy_lists_the_bad_tensors(zoo_folder):
    with pytest.raises(BrokenModelError) as info:
        loadguard.load(
            "AutoModelForCausalLM", zoo_folder("np_buffer"), trust_remote_code=True, poison=True, on_problem="raise"
        )
    assert "positions.table (uninitialized at " in str(info.value)
    assert "_init_weights" in info.value.hint
    assert not info.value.report.ok


@needs_v5
def test_raise_names_the_lasting_fix_command_with_the_flags_the_load_needed(zoo_folder):
    folder = zoo_folder("np_buffer")
    with pytest.raises(BrokenModelError) as info:
        loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, poison=True, on_problem="raise")
    assert f"loadguard fix {folder} --trust-remote-code --out {folder}-fixed" in info.value.hint
    assert "loadguard.repair(model, report)" in info.value.hint  # beside the in-memory repair


@needs_v5
@pytest.mark.parametrize("spelling", ["auto", ["auto"], ("auto",)])
def test_every_spelling_of_auto_applies_the_same_workarounds(zoo_folder, spelling):
    """loadguard.load and HfRunner: "auto" and ["auto"] mean the same (issue 56)."""
    from loadguard.runner import HfRunner

    folder = zoo_folder("typing_alias")
    model = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, workarounds=spelling)
    applied = [(w.name, w.status) for w in model.loadguard_report.workarounds]
    assert applied == [("remote-code-typing-aliases", "applied")]
    with HfRunner(folder, trust_remote_code=True, workarounds=spelling) as runner:
        assert [(w.name, w.status) for w in runner.report.workarounds if w.stage == "before_import"] == applied


def test_an_unknown_workaround_name_is_one_error_listing_the_known_ones(zoo_folder):
    from loadguard.errors import WorkaroundError

    for spelling in ("autoo", ["autoo"]):
        with pytest.raises(WorkaroundError) as info:
            loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=spelling)
        assert info.value.message == "there is no workaround called 'autoo'"
        assert "remote-code-typing-aliases" in info.value.hint and "loadguard workarounds list" in info.value.hint


@needs_v5
def test_warn_policy_returns_the_model_as_loaded(zoo_folder):
    with pytest.warns(loadguard.LoadguardWarning, match="resampler.pos_embed"):
        model = loadguard.load(
            "AutoModelForCausalLM",
            zoo_folder("minicpmv_like"),
            trust_remote_code=True,
            poison=True,
            on_problem="warn",
            workarounds="auto",
        )
    assert torch.isnan(model.resampler.pos_embed).all()


@needs_v5
def test_repair_policy_raises_when_something_stays_broken(zoo_folder):
    with pytest.raises(BrokenModelError, match="repair left it broken.*logit_scale"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("missing_key"), trust_remote_code=True, poison=True)


def test_clean_model_loads_with_an_ok_report(zoo_folder):
    from transformers import AutoModelForCausalLM

    model = loadguard.load(AutoModelForCausalLM, zoo_folder("clean"), trust_remote_code=True, dtype="bfloat16")
    assert model.loadguard_report.ok and model.loadguard_repair is None
    assert model.lm_head.weight.dtype == torch.bfloat16


def test_bad_arguments_are_typed_errors(zoo_folder, tmp_path):
    with pytest.raises(InvalidOptionError, match="not a policy"):
        loadguard.load("AutoModel", zoo_folder("clean"), on_problem="ignore")
    with pytest.raises(RemoteCodeNotTrustedError, match="configuration_lgtoy.py, modeling_lgtoy.py"):
        loadguard.load("AutoModel", zoo_folder("clean"))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        loadguard.load("AutoModel", tmp_path / "nowhere")
    with pytest.raises(InvalidOptionError, match="not a dtype"):
        loadguard.load("AutoModel", zoo_folder("clean"), trust_remote_code=True, dtype="float8")


def test_load_and_the_runner_take_output_loading_info_and_keep_transformers_report(native_folders):
    from loadguard._hf.loading_info import of
    from loadguard.runner import HfRunner

    folder, _ = native_folders["llama"]
    model = loadguard.load("LlamaModel", folder, output_loading_info=True)  # a base model from a head checkpoint
    assert isinstance(model, torch.nn.Module) and model.loadguard_report.ok
    info = of(model)
    assert info is not None and "lm_head.weight" in info.unexpected
    with HfRunner(folder, model_kwargs={"output_loading_info": True}) as hf:
        assert isinstance(hf.model, torch.nn.Module) and hf.report.ok
