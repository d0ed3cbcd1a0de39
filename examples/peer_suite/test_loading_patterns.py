"""A peer-style suite: tiny native models loaded the ways real test suites load them.

Eight architectures (decoder, MoE, encoder, encoder-decoder, vision, VLM, speech, and classification heads), each
saved with ``save_pretrained`` and loaded back by ``from_pretrained`` in the patterns independent suites use:
a plain round trip, ``output_loading_info=True``, a head from a base checkpoint, a base from a head checkpoint,
``ignore_mismatched_sizes``, sharded and ``.bin`` checkpoints, ``dtype``/``device_map``, a state dict with no folder,
untied embeddings and a checkpoint that omits its tied weights. Every test passes without loadguard; with
``--loadguard=fail`` (and ``--loadguard-poison``) it must pass the same way: none of these is a loading defect.

``LOADGUARD_PEER_BROKEN=1`` adds the positive side: the same patterns on a zoo model that really loads broken,
which passes here (its shapes are right) and must fail under the plugin.

Every load goes through :func:`load`, which counts them (``LOADGUARD_PEER_COUNT=FILE`` receives the count), so a
test of this suite can check that the plugin's summary counted each one.
"""

from __future__ import annotations

import os

import pytest
import torch
import transformers

LOADS = {"count": 0}


def load(cls, *args, **kwargs):
    """``cls.from_pretrained(*args, **kwargs)``, counted."""
    LOADS["count"] += 1
    return cls.from_pretrained(*args, **kwargs)


def _arch(name: str):
    """(config, base class, head class, classification class or None, the head's key prefix) of a tiny model."""
    t = transformers
    decoder = dict(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    vision = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=8
    )
    if name == "decoder":
        return t.LlamaConfig(**decoder), t.LlamaModel, t.LlamaForCausalLM, t.LlamaForSequenceClassification
    if name == "moe":
        return (
            t.MixtralConfig(**decoder, num_local_experts=4, num_experts_per_tok=2),
            t.MixtralModel,
            t.MixtralForCausalLM,
            t.MixtralForSequenceClassification,
        )
    if name == "encoder":
        config = t.BertConfig(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2
        )
        return config, t.BertModel, t.BertForMaskedLM, t.BertForSequenceClassification
    if name == "encoder_decoder":
        config = t.BartConfig(
            vocab_size=64,
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            max_position_embeddings=32,
        )
        return config, t.BartModel, t.BartForConditionalGeneration, t.BartForSequenceClassification
    if name == "vision":
        return t.ViTConfig(**vision), t.ViTModel, t.ViTForImageClassification, None
    if name == "vlm":
        config = t.LlavaConfig(
            text_config=t.LlamaConfig(**decoder), vision_config=t.CLIPVisionConfig(**vision), image_token_index=63
        )
        return config, t.LlavaModel, t.LlavaForConditionalGeneration, None
    if name == "speech":
        config = t.Wav2Vec2Config(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            conv_dim=(8, 8),
            conv_stride=(4, 4),
            conv_kernel=(8, 4),
            num_conv_pos_embeddings=8,
            num_conv_pos_embedding_groups=2,
        )
        return config, t.Wav2Vec2Model, t.Wav2Vec2ForCTC, t.Wav2Vec2ForSequenceClassification
    if name == "classifier":
        config = t.DistilBertConfig(vocab_size=64, dim=16, hidden_dim=32, n_layers=2, n_heads=2)
        return config, t.DistilBertModel, t.DistilBertForSequenceClassification, t.DistilBertForSequenceClassification
    raise KeyError(name)


ARCHS = ["decoder", "moe", "encoder", "encoder_decoder", "vision", "vlm", "speech", "classifier"]
HEADED = [a for a in ARCHS if a not in ("vision", "vlm")]  # a classification head whose size can change


def build(cls, config):
    torch.manual_seed(0)
    return cls(config).eval()


def same_state(a, b) -> bool:
    left, right = a.state_dict(), b.state_dict()
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k].to(left[k].dtype)) for k in left)


@pytest.mark.parametrize("arch", ARCHS)
def test_roundtrip(arch, tmp_path):
    config, _, head, _ = _arch(arch)
    model = build(head, config)
    model.save_pretrained(tmp_path)
    assert same_state(model, load(head, tmp_path))


@pytest.mark.parametrize("arch", ARCHS)
def test_output_loading_info(arch, tmp_path):
    config, _, head, _ = _arch(arch)
    build(head, config).save_pretrained(tmp_path)
    model, info = load(head, tmp_path, output_loading_info=True)
    assert isinstance(model, head) and list(info["missing_keys"]) == [] and list(info["mismatched_keys"]) == []


@pytest.mark.parametrize("arch", ARCHS)
def test_head_from_base_checkpoint(arch, tmp_path):
    config, base, head, _ = _arch(arch)
    build(base, config).save_pretrained(tmp_path)
    model = load(head, tmp_path)
    assert isinstance(
        model, head
    )  # the head's own tensors (if untied) are missing on purpose: _init_weights makes them
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("arch", ARCHS)
def test_base_from_head_checkpoint(arch, tmp_path):
    config, base, head, _ = _arch(arch)
    build(head, config).save_pretrained(tmp_path)
    model = load(base, tmp_path)
    assert isinstance(model, base)  # the head's keys are dropped as unexpected (a pooler the head lacks: missing)
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("arch", HEADED)
def test_ignore_mismatched_sizes(arch, tmp_path):
    config, _, _, classifier = _arch(arch)
    config.num_labels = 2
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = 0
    build(classifier, config).save_pretrained(tmp_path)
    model = load(classifier, tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert model.config.num_labels == 5 and all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("arch", ["decoder", "encoder", "speech"])
def test_sharded_and_bin_checkpoints(arch, tmp_path):
    config, _, head, _ = _arch(arch)
    model = build(head, config)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 1
    assert same_state(model, load(head, tmp_path / "sharded"))
    model.save_pretrained(tmp_path / "bin", safe_serialization=False)
    assert same_state(model, load(head, tmp_path / "bin"))


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder", "vlm"])
def test_dtype_and_device_map(arch, tmp_path):
    config, _, head, _ = _arch(arch)
    build(head, config).save_pretrained(tmp_path)
    model = load(head, tmp_path, dtype=torch.bfloat16, device_map="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("arch", ["decoder", "encoder", "vision"])
def test_state_dict_without_a_folder(arch):
    config, _, head, _ = _arch(arch)
    model = build(head, config)
    again = load(head, None, config=config, state_dict=model.state_dict())
    assert same_state(model, again)


def test_untied_embeddings_roundtrip(tmp_path):
    config, _, head, _ = _arch("decoder")
    config.tie_word_embeddings = False
    model = build(head, config)
    model.save_pretrained(tmp_path)
    again = load(head, tmp_path)
    assert same_state(model, again) and again.lm_head.weight.data_ptr() != again.model.embed_tokens.weight.data_ptr()


def test_checkpoint_that_omits_tied_weights(tmp_path):
    config, _, head, _ = _arch("decoder")
    config.tie_word_embeddings = True
    model = build(head, config)
    model.save_pretrained(tmp_path)
    again = load(head, tmp_path)
    assert torch.equal(again.lm_head.weight, again.model.embed_tokens.weight) and same_state(model, again)


@pytest.mark.skipif(
    os.environ.get("LOADGUARD_PEER_BROKEN") != "1", reason="the positive side runs with LOADGUARD_PEER_BROKEN=1"
)
def test_a_model_that_really_loads_broken(tmp_path):
    """A remote-code model whose non-persistent buffers transformers 5 leaves uninitialized: shapes are right, so this
    test passes without loadguard; under the plugin it must fail."""
    from loadguard import zoo

    folder = zoo.build("np_buffer", tmp_path / "np_buffer")
    model = load(transformers.AutoModelForCausalLM, folder, trust_remote_code=True)
    assert model.positions.table.shape == (64, 32)


@pytest.mark.parametrize("head", ["T5ForSequenceClassification", "T5ForTokenClassification"])
def test_a_tie_the_config_asks_for_and_the_checkpoint_declines(head, tmp_path):
    """As transformers' own tests build them: T5's config ties embeddings whatever it is given, a test switches the
    tie off afterwards, so the checkpoint holds three different tables; on reload transformers declines the tie and
    keeps every table's value (only the outer model's tie list drops it, the nested encoder-decoder's keeps it)."""
    cls = getattr(transformers, head)
    config = transformers.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4, num_labels=3)
    config.tie_word_embeddings = False
    model = build(cls, config)
    model.save_pretrained(tmp_path)
    assert same_state(model, load(cls, tmp_path))


@pytest.mark.skipif(
    os.environ.get("LOADGUARD_PEER_BROKEN") != "1", reason="the positive side runs with LOADGUARD_PEER_BROKEN=1"
)
def test_a_missing_scalar_nothing_initializes_loads_broken(tmp_path):
    """CLIP's logit_scale absent from the checkpoint: transformers lists it as newly initialized, but CLIPModel's
    _init_weights never writes it, so it keeps leftover memory. Its shape is right: this test passes without loadguard;
    under the plugin, without poison, it must fail."""
    from safetensors.torch import load_file, save_file

    text = dict(
        vocab_size=64,
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
    build(
        transformers.CLIPModel, transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)
    ).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["logit_scale"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    model, info = load(transformers.CLIPModel, tmp_path, output_loading_info=True)
    assert "logit_scale" in info["missing_keys"] and model.logit_scale.shape == ()
