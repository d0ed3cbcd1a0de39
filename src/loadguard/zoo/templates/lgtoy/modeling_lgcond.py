"""The toy causal LM with a quantized-cache bound computed from a local that ``__init__`` assigns under an ``if`` of
the config (a loadguard zoo model; remote code), as published code with a quantized KV cache does:

    if config.quantize_kv_cache:
        qmax = 2 ** (config.kv_cache_bits - 1) - 1
    else:
        qmax = ...
    self.register_buffer("cache_qmax", torch.tensor(qmax, dtype=torch.float32), persistent=False)

transformers 5 leaves the buffer uninitialized (failure mode a); a recompute must take the same branch.
"""

import torch
from torch import nn

from .configuration_lgcond import LgCondConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgQuantBound(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        if config.quantize_kv_cache:
            qmax = 2 ** (config.kv_cache_bits - 1) - 1
        else:
            qmax = 65504
        self.register_buffer("cache_qmax", torch.tensor(qmax, dtype=torch.float32), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.clamp(-self.cache_qmax, self.cache_qmax) / self.cache_qmax


class LgCondForCausalLM(LgToyForCausalLM):
    config_class = LgCondConfig

    def __init__(self, config):
        super().__init__(config)
        self.bound = LgQuantBound(config)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        embeds = self.embed_tokens(input_ids)
        return self.decode(embeds + self.positions(input_ids.shape[1]).to(embeds.dtype) + self.bound(embeds))
