"""The toy causal LM as remote code written for transformers 4.x (a loadguard zoo model; remote code).

It declares ``_tied_weights_keys`` as a v4 list and never calls ``post_init()`` (4.x did not need it),
so transformers 5 fails with ``'LgV4ForCausalLM' object has no attribute 'all_tied_weights_keys'``.
"""

import math

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.modeling_outputs import CausalLMOutput

from .configuration_lgv4 import LgV4Config
from .modeling_lgtoy import LgToyBlock, LgToyPositions, LgToyPreTrainedModel


class LgV4ForCausalLM(LgToyPreTrainedModel, GenerationMixin):
    config_class = LgV4Config
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = LgToyPositions(config)
        self.layers = nn.ModuleList([LgToyBlock(config) for _ in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # no self.post_init(): written for transformers 4.x

    def get_input_embeddings(self):
        return self.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs) -> CausalLMOutput:
        hidden = self.embed_tokens(input_ids) + self.positions(input_ids.shape[1]).to(self.embed_tokens.weight.dtype)
        for layer in self.layers:
            hidden = layer(hidden)
        return CausalLMOutput(logits=self.lm_head(self.norm(hidden)) / math.sqrt(1.0))
