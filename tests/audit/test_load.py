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
