"""The toy causal LM with a rotary table chosen the transformers 4.x way (a loadguard zoo model; remote code).

Like DeepSeek-V2 and InternLM2 code, ``__init__`` picks the rotary class with
``config.rope_scaling["type"]`` unless ``rope_scaling`` is None. transformers 5 hands back
``{'rope_theta': ..., 'rope_type': 'default'}`` for ``rope_scaling: null``: ``KeyError: 'type'``. Its
``inv_freq`` is a non-persistent buffer that ``_init_weights`` does not rebuild (failure mode a).
"""

import torch
from torch import nn

from .configuration_lgv4rope import LgV4RopeConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, base: float = 10000.0, scaling_factor: float = 1.0):
        super().__init__()
        self.scaling_factor = scaling_factor
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq_len: int) -> torch.Tensor:
        positions = torch.arange(seq_len, dtype=torch.float32, device=self.inv_freq.device) / self.scaling_factor
        angles = positions[:, None] * self.inv_freq[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class LgV4RopeForCausalLM(LgToyForCausalLM):
    config_class = LgV4RopeConfig

    def __init__(self, config):
        super().__init__(config)
        if config.rope_scaling is None:
            self.rotary = LgV4RotaryEmbedding(config.hidden_size, config.rope_theta)
        else:
            scaling_type = config.rope_scaling["type"]
            if scaling_type != "linear":
                raise ValueError(f"Unknown RoPE scaling type {scaling_type}")
            self.rotary = LgV4RotaryEmbedding(config.hidden_size, config.rope_theta, config.rope_scaling["factor"])

    def forward(self, input_ids, attention_mask=None, **kwargs):
        embeds = self.embed_tokens(input_ids)
        return self.decode(embeds + (self.positions(input_ids.shape[1]) + 0.1 * self.rotary(input_ids.shape[1])).to(embeds.dtype))
