"""The toy causal LM with a position table cached the 4.3x-era rotary way (a loadguard zoo model; remote code):
``__init__`` computes it as a non-persistent buffer and leaves ``max_seq_len_cached = None``, so the first forward pass
rebuilds it before reading it. transformers 5 leaves the buffer uninitialized after loading; the outputs never see it.
"""

import torch
from torch import nn

from .configuration_lgrebuilt import LgRebuiltConfig
from .modeling_lgtoy import LgToyForCausalLM, sincos_table


class LgRebuiltCache(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.max_position_embeddings = config.max_position_embeddings
        self.dim = config.hidden_size
        self.register_buffer("cached", sincos_table(self.max_position_embeddings, self.dim), persistent=False)
        self.max_seq_len_cached = None  # set by the first forward pass, which rebuilds the table first

    def forward(self, seq_len: int) -> torch.Tensor:
        if self.max_seq_len_cached is None or seq_len > self.max_seq_len_cached:
            self.max_seq_len_cached = max(seq_len, self.max_position_embeddings)
            self.cached = sincos_table(self.max_seq_len_cached, self.dim, self.cached.device)
        return self.cached[:seq_len]


class LgRebuiltForCausalLM(LgToyForCausalLM):
    config_class = LgRebuiltConfig

    def __init__(self, config):
        super().__init__(config)
        self.rotary = LgRebuiltCache(config)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        hidden = self.embed_tokens(input_ids) + self.rotary(input_ids.shape[1]).to(self.embed_tokens.weight.dtype)
        return self.decode(hidden)
