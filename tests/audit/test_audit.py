"""audit() on every zoo model, on native models and on a real checkpoint; bad input; immutability."""

from __future__ import annotations

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadguard
from loadguard import zoo
from loadguard.errors import CheckpointError

from ..conftest import IS_V5, TRANSFORMERS_VERSION, all_tensors, layer_count, load

BROKEN = [e.name for e in zoo.entries() if e.failure_mode]
CLEAN = [e.name for e in zoo.entries() if not e.failure_mode]
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


def expected(name):
    entry = zoo.get(name)
    layers = layer_count(zoo.build_model(name).config)
    return {f.tensor: f.status for f in entry.expected_for(layers)}


@needs_v5
@pytest.mark.parametrize("name", BROKEN)
def test_finds_exactly_each_failure(zoo_folder, name):
    with loadguard.poison():
        model = load(zoo_folder(name))
    report = loadguard.audit(model)
    assert not report.ok
    assert {f.tensor: f.status for f in report.failures} == expected(name)
    assert all(f.kind in ("parameter", "buffer", "attribute") and f.detail for f in report.failures)


@needs_v5
def test_check_names_and_counts(zoo_folder):
    with loadguard.poison():
        report = loadguard.audit(load(zoo_folder("shared_buffer")))
    by_tensor = {f.tensor: f for f in report.findings}
    assert by_tensor["layers.0.attn.causal_mask"].check == "non_persistent_buffer"
    assert by_tensor["layers.1.attn.causal_mask"].check == "meta_leftover"
    assert report.summary("non_persistent_buffer").failed == 3
    assert report.counts()["meta_leftover"] == {"on_meta": 1}
    with loadguard.poison():
        report = loadguard.audit(load(zoo_folder("overwritten")))
    assert report.failures[0].check == "checkpoint_fidelity" and report.failures[0].max_abs_diff > 0
    with loadguard.poison():
        report = loadguard.audit(load(zoo_folder("missing_key")))
    assert report.failures[0].check == "missing_key" and report.summary("missing_key").checked == 1


@pytest.mark.parametrize("name", CLEAN)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_clean_models_audit_clean(zoo_folder, name, dtype):
    with loadguard.poison():
        model = load(zoo_folder(name), dtype=dtype)
    report = loadguard.audit(model)
    assert report.ok and report.findings == ()
    assert all(s.ran for s in report.checks)
    assert report.summary("checkpoint_fidelity").checked == len(model.state_dict())


@needs_v5
@pytest.mark.parametrize("name", ["minicpmv_like", "overwritten"])
def test_broken_models_found_in_bfloat16(zoo_folder, name):
    with loadguard.poison():
        model = load(zoo_folder(name), dtype=torch.bfloat16)
    assert {f.tensor for f in loadguard.audit(model).failures} == set(expected(name))


@pytest.mark.parametrize("native", ["llama", "bert", "clip", "llava"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_round_trips_audit_clean(native_folders, native, dtype):
    folder, auto = native_folders[native]
    with loadguard.poison():
        model = getattr(transformers, auto).from_pretrained(folder, dtype=dtype)
    report = loadguard.audit(model)
    assert report.ok, [(f.tensor, f.detail) for f in report.failures]
    assert report.summary("non_persistent_buffer").checked >= 1
    assert report.summary("checkpoint_fidelity").checked == len(model.state_dict())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_real_minilm_checkpoint_has_no_false_positive(minilm_folder, dtype):
    with loadguard.poison():
        model = transformers.AutoModel.from_pretrained(minilm_folder, dtype=dtype)
    report = loadguard.audit(model)
    assert report.ok and report.findings == ()
    assert report.summary("checkpoint_fidelity").checked == len(model.state_dict()) == 103
    # the checkpoint still carries the old persistent position_ids, which transformers ignores
    assert report.unexpected_checkpoint_keys == ("embeddings.position_ids",)


@pytest.mark.parametrize("where", [(0, 0), (300, 200)])
def test_a_weight_changed_after_loading_is_overwritten(minilm_folder, where):
    import sys

    model = transformers.AutoModel.from_pretrained(minilm_folder)
    if sys.platform.startswith("linux"):  # untouched weights are proven from the page state, not read
        assert "103 proven unmodified" in loadguard.audit(model).summary("checkpoint_fidelity").reason
    with torch.no_grad():
        model.encoder.layer[3].intermediate.dense.weight[where] += 0.25
    report = loadguard.audit(model)
    (finding,) = report.failures
    assert finding.tensor == "encoder.layer.3.intermediate.dense.weight"
    assert finding.status == "overwritten" and abs(finding.max_abs_diff - 0.25) < 1e-6
    assert report.summary("checkpoint_fidelity").checked == 103


def test_checkpoint_is_found_from_name_or_path_or_given(zoo_folder, tmp_path):
    folder = zoo_folder("clean")
    model = load(folder)
    assert loadguard.audit(model).checkpoint == str(folder)
    assert loadguard.audit(model, folder / "model.safetensors").summary("checkpoint_fidelity").ran
    skipped = loadguard.audit(model, False)
    assert (
        not skipped.summary("checkpoint_fidelity").ran
        and "checkpoint=False" in skipped.summary("checkpoint_fidelity").reason
    )
    model.config._name_or_path = "someone/remote-model"
    assert not loadguard.audit(model).summary("missing_key").ran
    with pytest.raises(CheckpointError):
        loadguard.audit(model, tmp_path / "missing")


@needs_v5
def test_audit_without_reference_still_runs_the_other_checks(zoo_folder):
    with loadguard.poison():
        model = load(zoo_folder("np_buffer"))
    report = loadguard.audit(model, reference=None)
    summary = report.summary("non_persistent_buffer")
    assert "reference" in summary.reason
    assert {f.tensor for f in report.failures} == {"positions.table", "positions.index"}  # NaN / INT_MAX
    assert report.summary("checkpoint_fidelity").ran


@needs_v5
def test_reference_build_failure_is_reported_not_raised(zoo_folder):
    with loadguard.poison():
        model = load(zoo_folder("minicpmv_like"))
    model.config.resampler_max_size = "not a size"  # the constructor now fails
    report = loadguard.audit(model)
    summary = report.summary("non_persistent_buffer")
    assert "building the reference of LgMiniCPMV from its config failed" in summary.reason
    assert [f.tensor for f in report.failures] == ["resampler.pos_embed"]  # still NaN
    assert report.summary("checkpoint_fidelity").ran and report.summary("checkpoint_fidelity").failed == 0


def test_report_json_is_stable(zoo_folder):
    import json

    with loadguard.poison():
        report = loadguard.audit(load(zoo_folder("minicpmv_like")))
    document = json.loads(report.to_json())
    assert {"model", "ok", "findings", "checks", "counts", "versions"} <= set(document)
    if IS_V5:
        (finding,) = document["findings"]
        assert finding["tensor"] == "resampler.pos_embed" and finding["kind"] == "buffer"
        assert finding["check"] == "non_persistent_buffer" and finding["status"] == "uninitialized"
        assert finding["shape"] == [70, 70, 32] and finding["dtype"] == "float32"


def snapshot(model):
    return {k: (v, v.clone() if v.device.type != "meta" else None) for k, v in all_tensors(model).items()}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from([e.name for e in zoo.entries()]), poisoned=st.booleans(), bf16=st.booleans())
def test_audit_never_changes_the_model(zoo_folder, name, poisoned, bf16):
    kwargs = {"dtype": torch.bfloat16} if bf16 else {}
    if poisoned:
        with loadguard.poison():
            model = load(zoo_folder(name), **kwargs)
    else:
        model = load(zoo_folder(name), **kwargs)
    before = snapshot(model)
    rng = torch.random.get_rng_state()
    loadguard.audit(model)
    after = snapshot(model)
    assert before.keys() == after.keys()
    for key, (tensor, values) in before.items():
        assert after[key][0] is tensor, key
        if values is not None:
            same_nan = torch.equal(tensor.isnan(), values.isnan()) if tensor.is_floating_point() else True
            assert same_nan and torch.equal(torch.nan_to_num(tensor), torch.nan_to_num(values)), key
    assert torch.equal(rng, torch.random.get_rng_state())


def test_keys_fused_on_load_are_reported_not_skipped(tmp_path):
    """A legacy per-expert Mixtral checkpoint: v5 fuses experts on load; those tensors are named as fused."""
    from safetensors.torch import save_file
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=2,
        num_experts_per_tok=1,
    )
    model = MixtralForCausalLM(config)
    legacy = {}
    for key, value in model.state_dict().items():
        base = key.replace(".mlp.experts.gate_up_proj", ".block_sparse_moe.experts").replace(
            ".mlp.experts.down_proj", ".block_sparse_moe.experts"
        )
        if key.endswith("experts.gate_up_proj"):
            for expert in range(value.shape[0]):
                w1, w3 = value[expert].chunk(2, dim=0)
                legacy[f"{base}.{expert}.w1.weight"], legacy[f"{base}.{expert}.w3.weight"] = (
                    w1.contiguous(),
                    w3.contiguous(),
                )
        elif key.endswith("experts.down_proj"):
            for expert in range(value.shape[0]):
                legacy[f"{base}.{expert}.w2.weight"] = value[expert].contiguous()
        elif key.endswith(".w1.weight") or key.endswith(".w2.weight") or key.endswith(".w3.weight"):
            legacy[key.replace(".mlp.", ".block_sparse_moe.")] = value.contiguous()  # transformers 4.x layout
        else:
            legacy[key.replace(".mlp.", ".block_sparse_moe.")] = value.contiguous()
    config.save_pretrained(tmp_path)
    save_file(legacy, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    report = loadguard.audit(MixtralForCausalLM.from_pretrained(tmp_path))
    fidelity = report.summary("checkpoint_fidelity")
    assert report.ok and report.unexpected_checkpoint_keys == ()
    assert report.summary("missing_key").checked == 0
    fused = [f for f in report.findings if "several checkpoint keys" in f.detail]
    assert fidelity.checked + len(fused) == len(model.state_dict())
    if IS_V5:
        assert sorted(f.tensor for f in fused) == [
            "model.layers.0.mlp.experts.down_proj",
            "model.layers.0.mlp.experts.gate_up_proj",
        ]
        assert all(f.status == "unverifiable" for f in fused) and fidelity.unverifiable == 2


def test_persistent_buffers_the_checkpoint_holds_are_not_built_for_the_reference(tmp_path, monkeypatch):
    """int8 weights kept as persistent buffers (code that quantizes itself): the checkpoint is their truth, so the
    audit's reference leaves those over 1 MiB unbuilt; a checkpoint lacking one needs them (missing key, repair)."""
    import importlib

    from safetensors.torch import load_file, save_file

    audit_module = importlib.import_module("loadguard._audit.auditing")
    asked = []
    build = audit_module.build_reference
    monkeypatch.setattr(audit_module, "build_reference", lambda model, **kw: asked.append(kw) or build(model, **kw))
    folder = zoo.build("int8_buffers", tmp_path / "int8", hidden_size=512, intermediate_size=4096)
    model = load(folder)
    report = loadguard.audit(model, folder)
    assert asked[-1] == {"persistent_buffers": False}
    # which status (uninitialized or mismatch) depends on what the leftover memory held: the names do not
    assert {f.tensor for f in report.failures} == (
        {f.tensor for f in zoo.get("int8_buffers").expected_for(2)} if IS_V5 else set()
    )
    tensors = load_file(folder / "model.safetensors")
    del tensors["layers.0.fc_in.weight_scale"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    loadguard.audit(model, folder)
    assert asked[-1] == {"persistent_buffers": True}


def test_reports_give_torchs_build_beside_its_version():
    import torch

    from loadguard._audit.auditing import versions

    found = versions()
    assert found["torch"] == torch.__version__  # with its local part: 2.13.0+cpu, 2.14.1+cu130
    assert found["torch_build"] == (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU")
