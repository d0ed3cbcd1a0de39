"""Replaying transformers' weight initialization on a loaded model with every write held back."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from loadguard import audit, zoo
from loadguard._hf import replay as _replay

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} initializes what it reports")


def _tiny_clip():
    from transformers import CLIPConfig, CLIPModel

    text = dict(
        vocab_size=99,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=20,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    vision = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8
    )
    return CLIPModel, CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)


def _load_without(cls, config, folder, dropped):
    torch.manual_seed(0)
    cls(config).save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    for key in dropped:
        tensors.pop(key)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return cls.from_pretrained(folder, output_loading_info=True)


def _state(model):
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_a_replay_sees_what_initialization_writes_and_changes_nothing(tmp_path):
    cls, config = _tiny_clip()
    model, _ = _load_without(cls, config, tmp_path, ["logit_scale", "text_projection.weight"])
    before, rng, flags = (
        _state(model),
        torch.get_rng_state(),
        {id(m): vars(m).get("_is_hf_initialized") for m in model.modules()},
    )
    parameters = {name: p for name, p in model.named_parameters()}
    replay = _replay.initialization(model, ["logit_scale", "text_projection.weight"])
    assert replay.error is None and replay.wrote("text_projection.weight")
    assert replay.written["text_projection.weight"].startswith("transformers/models/clip/modeling_clip.py:")
    assert replay.ran[-1] == "CLIPModel" and "text_projection" in replay.ran  # children first, the root last
    # nothing changed: values, the tensors themselves, the modules' flags, the RNG
    after = _state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p is parameters[name] for name, p in model.named_parameters())
    assert {id(m): vars(m).get("_is_hf_initialized") for m in model.modules()} == flags
    assert torch.equal(rng, torch.get_rng_state())


@needs_v5
def test_transformers_calls_clips_missing_logit_scale_initialized_and_nothing_writes_it(tmp_path):
    cls, config = _tiny_clip()
    model, info = _load_without(cls, config, tmp_path, ["logit_scale", "text_projection.weight"])
    assert {"logit_scale", "text_projection.weight"} <= set(info["missing_keys"])
    assert not _replay.initialization(model, ["logit_scale"]).wrote("logit_scale")
    with torch.no_grad():
        model.logit_scale.fill_(2.5)  # leftover memory that looks like a value: only what initialization did tells
    report = audit(model, loading_info=info)
    by_name = {f.tensor: f for f in report.findings}
    assert by_name["logit_scale"].status == "uninitialized" and by_name["logit_scale"].failing
    assert (
        "transformers reports it newly initialized (missing_keys), but nothing wrote it"
        in by_name["logit_scale"].detail
    )
    assert (
        by_name["text_projection.weight"].status == "initialized"
        and "modeling_clip.py:" in by_name["text_projection.weight"].detail
    )
    assert [f.tensor for f in report.failures] == ["logit_scale"]
    # without loading info (a user's own from_pretrained), the same verdict: the init pass ran on this model
    assert [f.tensor for f in audit(model).failures] == ["logit_scale"]


@needs_v5
def test_the_zoo_scalar_nothing_initializes_fails_whatever_value_it_holds(tmp_path):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        zoo.build("missing_key", tmp_path / "m"), trust_remote_code=True, output_loading_info=True
    )
    for plausible in (0.0, 1.3862943649291992):  # zeros, or exactly the constructor's log(4)
        with torch.no_grad():
            model.logit_scale.fill_(plausible)
        (finding,) = audit(model, loading_info=info).failures
        assert (finding.tensor, finding.status) == (
            "logit_scale",
            "uninitialized",
        ) and "nothing wrote it" in finding.detail


def test_a_head_loaded_from_a_base_checkpoint_is_initialized_where_seen_written(tmp_path):
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    config = BertConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_labels=3
    )
    BertModel(config).save_pretrained(tmp_path)
    model, info = BertForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    report = audit(model, loading_info=info)
    assert report.ok, [(f.tensor, f.detail) for f in report.failures]
    initialized = {f.tensor: f.detail for f in report.findings if f.status == "initialized"}
    assert set(initialized) == {"classifier.weight", "classifier.bias"}
    assert all("seen in a replay" in detail for detail in initialized.values())


def test_a_replay_that_the_models_code_breaks_says_so(tmp_path):
    cls, config = _tiny_clip()
    model, _ = _load_without(cls, config, tmp_path, ["logit_scale"])

    def broken(module):
        raise RuntimeError("reads a weight value")

    model._init_weights = broken
    replay = _replay.initialization(model, ["logit_scale"])
    assert replay.error == "RuntimeError: reads a weight value" and not replay.wrote("logit_scale")
