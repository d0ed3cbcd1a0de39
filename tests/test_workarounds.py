"""Workarounds prove they are needed, go stale when they are not, and fail loudly when they stop applying."""

from __future__ import annotations

import json

import pytest
import torch

import loadguard
from loadguard import workarounds as registry
from loadguard.compare import check_logprobs_close, check_outputs_equal
from loadguard.errors import StaleWorkaroundError, WorkaroundError
from loadguard.runner import HfRunner, default_cases

from .conftest import IS_V5, TRANSFORMERS_VERSION, forget_remote_code, load

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not need these workarounds")
MINICPMV = ["minicpmv-pos-cache", "minicpmv-26-runner"]


def outcomes(model):
    return {w.name: w for w in model.loadguard_report.workarounds}


@needs_v5
def test_pos_cache_applied_where_needed(zoo_folder):
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("minicpmv_like"), trust_remote_code=True, poison=True, workarounds=["minicpmv-pos-cache"])
    outcome = outcomes(model)["minicpmv-pos-cache"]
    assert outcome.status == "applied" and outcome.fixed == 1 and outcome.detail == "fixed resampler.pos_embed"
    assert model.loadguard_report.ok and not model.loadguard_report_as_loaded.ok
    assert model.loadguard_repair is None  # the workaround fixed it: nothing left for the generic repair


def test_pos_cache_is_stale_on_the_fixed_model_and_strict_errors(zoo_folder):
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, poison=True, workarounds=["minicpmv-pos-cache"])
    outcome = outcomes(model)["minicpmv-pos-cache"]
    assert outcome.status == "stale"
    assert outcome.detail == (
        f"transformers {TRANSFORMERS_VERSION} preserves resampler.pos_embed; remove workaround minicpmv-pos-cache, upstream transformers#48892"
    )
    with pytest.raises(StaleWorkaroundError, match="stale workaround: transformers .* preserves resampler.pos_embed"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds=["minicpmv-pos-cache"], strict_stale=True)


def test_pos_cache_on_a_model_without_a_resampler_errors(zoo_folder):
    with pytest.raises(WorkaroundError, match="does not apply to .*lgtoy.*it is for minicpmv"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=["minicpmv-pos-cache"])
    # a MiniCPM-V whose code changed: the resampler is gone, the workaround must not pass silently
    model = load(zoo_folder("minicpmv_like"))
    del model.resampler
    with pytest.raises(WorkaroundError, match="found nothing to fix"):
        registry.after_load(model, registry.resolve(["minicpmv-pos-cache"]))


def test_applied_and_fixed_nothing_is_an_error(zoo_folder):
    @registry.workaround("test-does-nothing", applies_to=["lgtoy"], stage="after_load", reason="test", upstream="none#0", targets=lambda m: ["positions.table"])
    def does_nothing(model):
        return 0

    try:
        with loadguard.poison():
            model = load(zoo_folder("np_buffer"))
        if not IS_V5:
            pytest.skip(f"transformers {TRANSFORMERS_VERSION} leaves nothing broken to fix")
        with pytest.raises(WorkaroundError, match="test-does-nothing applied to .* and fixed nothing"):
            registry.after_load(model, registry.resolve(["test-does-nothing"]))
    finally:
        registry.REGISTRY.pop("test-does-nothing")


def test_unknown_workaround(zoo_folder):
    with pytest.raises(WorkaroundError, match="no workaround called 'nope'") as info:
        loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=["nope"])
    assert "minicpmv-pos-cache" in info.value.hint


@needs_v5
def test_typing_aliases_make_the_import_work_and_restore_torch(zoo_folder):
    import torch.nn.functional as functional

    forget_remote_code("lgtyping")
    with pytest.raises(loadguard.LoadguardError, match="NameError: name 'List' is not defined"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("typing_alias"), trust_remote_code=True)
    forget_remote_code("lgtyping")
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("typing_alias"), trust_remote_code=True, workarounds=["remote-code-typing-aliases"])
    outcome = outcomes(model)["remote-code-typing-aliases"]
    assert outcome.status == "applied" and outcome.fixed == 1 and "List" in outcome.detail
    assert model.loadguard_report.ok
    assert not hasattr(functional, "List")  # global state restored


def test_typing_aliases_stale_on_code_that_imports(zoo_folder):
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=["remote-code-typing-aliases"])
    assert outcomes(model)["remote-code-typing-aliases"].status == "stale"


@needs_v5
def test_v4_tied_weights_keys(zoo_folder):
    from transformers import PreTrainedModel

    with pytest.raises(loadguard.LoadguardError, match="all_tied_weights_keys"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("v4_tied_weights"), trust_remote_code=True)
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("v4_tied_weights"), trust_remote_code=True, poison=True, workarounds=["v4-tied-weights-keys"])
    assert outcomes(model)["v4-tied-weights-keys"].status == "applied"
    assert model.loadguard_report.ok  # loads exactly, every weight from the checkpoint
    assert "all_tied_weights_keys" not in PreTrainedModel.__dict__  # the bridge is gone after the load
    model(torch.tensor([[10, 11, 12]]))


def test_v4_tied_weights_keys_stale_on_v5_code(zoo_folder):
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=["v4-tied-weights-keys"])
    assert outcomes(model)["v4-tied-weights-keys"].status == "stale"


def test_runner_workaround_is_needed_for_minicpmv_and_not_applied_elsewhere(zoo_folder):
    prompts, images = default_cases(zoo_folder("minicpmv_like_fixed"))
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, auto_workarounds=False) as hf:
        with pytest.raises(TypeError, match="image_sizes"):
            hf.generate_greedy(prompts[:1], 2, images=images[:1])
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds=["minicpmv-26-runner"], auto_workarounds=False) as hf:
        (ids, text), = hf.generate_greedy(prompts[:1], 2, images=images[:1])
        assert len(ids) == 2 and [w.status for w in hf.workarounds] == ["applied"]
    with HfRunner(zoo_folder("clean"), trust_remote_code=True) as hf:
        assert hf.workarounds == []  # the automatic runner workarounds apply only where they apply
    with pytest.raises(WorkaroundError, match="does not apply"):
        HfRunner(zoo_folder("clean"), trust_remote_code=True, workarounds=["minicpmv-26-runner"])


@needs_v5
def test_done_when_runner_with_minicpmv_workarounds_equals_the_fixed_variant(zoo_folder):
    prompts, images = default_cases(zoo_folder("minicpmv_like"))
    with HfRunner(zoo_folder("minicpmv_like"), trust_remote_code=True, poison=True, audit="raise", workarounds=MINICPMV) as hf:
        got = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
        greedy = hf.generate_greedy(prompts, 8, images=images)
        statuses = {w.name: w.status for w in hf.report.workarounds}
    assert statuses == {"minicpmv-pos-cache": "applied", "minicpmv-26-runner": "applied"}
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds=MINICPMV) as fixed:
        want = fixed.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
        assert {w.name: w.status for w in fixed.workarounds} == {"minicpmv-pos-cache": "stale", "minicpmv-26-runner": "applied"}
    assert got == want  # same tokens, text and logprobs, exactly
    check_logprobs_close(outputs_0_lst=got, outputs_1_lst=want, name_0="workarounds", name_1="fixed", check_lengths=True)
    check_outputs_equal(outputs_0_lst=greedy, outputs_1_lst=[(i, t) for i, t, _ in want], name_0="workarounds", name_1="fixed")


def test_cli_workaround_option_and_list(zoo_folder, capsys):
    from loadguard.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as info:
            main(list(args))
        return info.value.code, capsys.readouterr()

    code, captured = run("audit", str(zoo_folder("minicpmv_like_fixed")), "--trust-remote-code", "--workaround", "minicpmv-pos-cache", "--format", "json")
    document = json.loads(captured.out)
    assert code == 0 and document["workarounds"][0]["status"] == "stale"
    code, captured = run("audit", str(zoo_folder("minicpmv_like_fixed")), "--trust-remote-code", "--workaround", "minicpmv-pos-cache", "--strict-stale")
    assert code == 2 and "stale workaround" in captured.err
    code, captured = run("workarounds", "list", "--format", "json")
    names = [w["name"] for w in json.loads(captured.out)["workarounds"]]
    assert code == 0 and names == ["minicpmv-26-runner", "minicpmv-pos-cache", "remote-code-typing-aliases", "v4-tied-weights-keys"]
    code, captured = run("workarounds", "list", str(zoo_folder("minicpmv_like")), "--trust-remote-code", "--format", "json")
    status = {w["name"]: w["status"] for w in json.loads(captured.out)["workarounds"]}
    if IS_V5:
        assert status["minicpmv-pos-cache"] == "needed: resampler.pos_embed broken"
    assert status["minicpmv-26-runner"] == "needed"
    code, captured = run("workarounds", "list", str(zoo_folder("minicpmv_like_fixed")), "--trust-remote-code", "--format", "json")
    assert {w["name"]: w["status"] for w in json.loads(captured.out)["workarounds"]}["minicpmv-pos-cache"] == "stale: resampler.pos_embed already correct"
