"""A toy causal-LM head around an encoder-decoder, T5ForSequenceClassification-style (a loadguard zoo model; remote
code).

The encoder-decoder (``transformer``) declares, transformers-5 style, its encoder and decoder embedding tables tied
to the shared one when its config says ``tie_word_embeddings``. Built with the setting off, the three tables hold
different values and the checkpoint keeps all three; its config comes back tying. transformers then declines the
tie ("both are present in the checkpoints with different values, so we will NOT tie them") and drops it from the
outer model's ``all_tied_weights_keys``, while the nested encoder-decoder's own list keeps it. The load is correct:
every table holds its checkpoint value.
"""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.modeling_outputs import CausalLMOutput

from .configuration_lgs2shead import LgS2SHeadConfig
from .modeling_lgtoy import LgToyBlock, LgToyPositions, LgToyPreTrainedModel


class LgS2SHeadStack(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.block = LgToyBlock(config)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.block(self.embed_tokens(input_ids) + positions)


class LgS2SHeadModel(LgToyPreTrainedModel):
    config_class = LgS2SHeadConfig
    _tied_weights_keys = {"encoder.embed_tokens.weight": "shared.weight", "decoder.embed_tokens.weight": "shared.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = LgToyPositions(config)
        self.encoder = LgS2SHeadStack(config)
        self.decoder = LgS2SHeadStack(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value

    def forward(self, input_ids: torch.LongTensor) -> torch.Tensor:
        positions = self.positions(input_ids.shape[1]).to(self.shared.weight.dtype)
        return self.decoder(input_ids, positions) + self.encoder(input_ids, positions)


class LgS2SHeadForCausalLM(LgToyPreTrainedModel, GenerationMixin):
    config_class = LgS2SHeadConfig

    def __init__(self, config):
        super().__init__(config)
        self.transformer = LgS2SHeadModel(config)
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.logit_scale = None
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.shared

    def set_input_embeddings(self, value):
        self.transformer.shared = value

    def get_output_embeddings(self):  # a head of its own, never tied (as T5ForSequenceClassification's classifier)
        return None

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs) -> CausalLMOutput:
        return CausalLMOutput(logits=self.lm_head(self.norm(self.transformer(input_ids))))
