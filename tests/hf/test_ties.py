"""Which ties a model is expected to hold: those the running transformers applied, and those code written for
transformers 4 would have made under the same config, never a declaration alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from loadguard._hf import ties

from ..conftest import IS_V5, TRANSFORMERS_VERSION


class _Config(PretrainedConfig):
    model_type = "lgtiestest"

    def __init__(self, tie_word_embeddings=False, tie_tables=True, **kwargs):
        self.tie_tables = tie_tables
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


class _V4EncoderDecoder(PreTrainedModel):
    """transformers-4 style: a listed tie, made by its own _tie_weights only when its config says so."""

    config_class = _Config
    _tied_weights_keys = ["encoder.weight", "decoder.weight", "lm_head.weight"]

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(8, 4)
        self.encoder = nn.Embedding(8, 4)
        self.decoder = nn.Embedding(8, 4)
        self.lm_head = nn.Linear(4, 8, bias=False)

    def _tie_weights(self):
        if self.config.tie_tables:
            self.encoder.weight = self.shared.weight
            self.decoder.weight = self.shared.weight

    def get_input_embeddings(self):
        return self.shared

    def get_output_embeddings(self):
        return self.lm_head


def _v4(**config):
    model = _V4EncoderDecoder(_Config(**config))
    vars(model).pop("all_tied_weights_keys", None)  # as v4 code that never calls post_init leaves it
    return model


def _declared(model):
    return sorted((t.target, t.source, t.how) for t in ties.declared(model))


def test_v4_ties_are_what_its_own_tie_weights_makes_under_its_config():
    assert _declared(_v4(tie_tables=True)) == [
        ("decoder.weight", "shared.weight", "v4 list"),
        ("encoder.weight", "shared.weight", "v4 list"),
    ]
    # the same list, but the code ties nothing under this config: nothing is expected tied
    assert _declared(_v4(tie_tables=False)) == []
    # the output embeddings follow tie_word_embeddings, as 4.x's tie_weights did
    assert ("lm_head.weight", "shared.weight", "v4 list") in _declared(_v4(tie_tables=False, tie_word_embeddings=True))


def test_replaying_v4_tie_weights_changes_nothing():
    model = _v4(tie_tables=True)
    before = {name: p for name, p in model.named_parameters(remove_duplicate=False)}
    values = {name: p.detach().clone() for name, p in before.items()}
    ties.declared(model)
    after = dict(model.named_parameters(remove_duplicate=False))
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert all(torch.equal(values[k], after[k]) for k in values)


@pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} still has _tie_or_clone_weights: the replay runs there"
)
def test_v4_code_that_calls_a_helper_gone_from_5x_falls_back_to_its_embedding_tables():
    model = _v4(tie_tables=True)
    model._tie_weights = lambda: model._tie_or_clone_weights(model.encoder, model.shared)  # 4.x helper
    assert [t[0] for t in _declared(model)] == ["decoder.weight", "encoder.weight"]


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} has no all_tied_weights_keys")
def test_a_tie_declined_on_load_is_not_expected_though_a_nested_model_still_lists_it(tmp_path):
    from transformers import T5Config, T5ForSequenceClassification

    config = T5Config(vocab_size=99, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4, num_labels=3)
    config.tie_word_embeddings = False  # as transformers' own tests build it; T5's config ties again on reload
    T5ForSequenceClassification(config).save_pretrained(tmp_path)
    model = T5ForSequenceClassification.from_pretrained(tmp_path)
    assert model.all_tied_weights_keys == {} and model.transformer.all_tied_weights_keys  # declined at the top only
    assert _declared(model) == []
    # where transformers did tie, the top-level mapping says so, once per target
    tied = T5ForSequenceClassification(
        T5Config(vocab_size=99, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4, num_labels=3)
    )
    assert _declared(tied) == [
        ("transformer.decoder.embed_tokens.weight", "transformer.shared.weight", "mapping"),
        ("transformer.encoder.embed_tokens.weight", "transformer.shared.weight", "mapping"),
    ]
