"""The toy causal LM with a YaRN-scaled rotary embedding whose cos/sin tables are made by a helper method in the
dtype ``torch.get_default_dtype()`` gives while ``__init__`` runs (a loadguard zoo model; remote code), as published
DeepSeek-V2/V3-style remote code makes them:

    self._set_cos_sin_cache(seq_len=..., device=self.inv_freq.device, dtype=torch.get_default_dtype())

Loaded with ``dtype=torch.bfloat16`` (its config says so when saved in bfloat16), ``__init__`` runs under that default
dtype: the tables are bfloat16. transformers 5 leaves them uninitialized (failure mode a); a recompute that runs after
loading, where the default dtype is float32 again, must still make them as ``__init__`` did.
"""

import math

import torch
from torch import nn

from .configuration_lgyarn import LgYarnConfig
from .modeling_lgtoy import LgToyForCausalLM


def yarn_ramp(low: float, high: float, dim: int) -> torch.Tensor:
    if low == high:
        high += 0.001
    ramp = (torch.arange(dim, dtype=torch.float32) - low) / (high - low)
    return torch.clamp(ramp, 0, 1)


class LgYarnRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings, base, factor, original_max_position_embeddings, device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.factor = factor
        self.original_max_position_embeddings = original_max_position_embeddings
        exponents = torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim
        extrapolated = 1.0 / (base**exponents)
        interpolated = 1.0 / (factor * base**exponents)
        keep = 1.0 - yarn_ramp(dim // 8, dim // 4, dim // 2).to(device=device)
        self.register_buffer("inv_freq", interpolated * (1 - keep) + extrapolated * keep, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings, device=self.inv_freq.device, dtype=torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len, device, dtype):
        self.max_seq_len_cached = seq_len
        positions = torch.arange(seq_len, device=device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq.to(device))
        scale = 0.1 * math.log(self.factor) + 1.0
        self.register_buffer("cos_cached", (angles.cos() * scale).to(dtype), persistent=False)
        self.register_buffer("sin_cached", (angles.sin() * scale).to(dtype), persistent=False)

    def forward(self, seq_len: int) -> torch.Tensor:
        return torch.cat([self.sin_cached[:seq_len], self.cos_cached[:seq_len]], dim=-1)


class LgYarnForCausalLM(LgToyForCausalLM):
    config_class = LgYarnConfig

    def __init__(self, config):
        super().__init__(config)
        head_dim = config.hidden_size // config.num_attention_heads
        self.rotary = LgYarnRotaryEmbedding(
            head_dim,
            config.max_position_embeddings,
            config.rope_theta,
            config.rope_factor,
            config.original_max_position_embeddings,
        )

    def forward(self, input_ids, attention_mask=None, **kwargs):
        embeds = self.embed_tokens(input_ids)
        rotary = self.rotary(input_ids.shape[1])  # one head's width: the same rotation for every head
        rotary = rotary.repeat(1, embeds.shape[-1] // rotary.shape[-1])
        return self.decode(embeds + (self.positions(input_ids.shape[1]) + 0.1 * rotary).to(embeds.dtype))
