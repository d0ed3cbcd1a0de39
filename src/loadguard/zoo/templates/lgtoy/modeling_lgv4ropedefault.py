"""The toy causal LM with a rotary embedding that looks its frequencies up the transformers 4.x way (a loadguard zoo
model; remote code), as copies of 4.4x-era Llama code in remote models do:

    self.rope_type = "default"                      # or rope_scaling.get("rope_type", "default")
    self.rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
    inv_freq, self.attention_scaling = self.rope_init_fn(self.config, device)

transformers 5 computes plain RoPE elsewhere and dropped the registry's ``"default"`` key: ``KeyError: 'default'``.
Once constructed, its ``inv_freq`` and other buffers are not rebuilt (failure mode a).
"""

import torch
from torch import nn
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .configuration_lgv4ropedefault import LgV4RopeDefaultConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4DefaultRotaryEmbedding(nn.Module):
    def __init__(self, config, device=None):
        super().__init__()
        rope_scaling = getattr(config, "rope_scaling", None)
        self.rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default")) if isinstance(rope_scaling, dict) else "default"
        self.config = config
        self.rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = self.rope_init_fn(self.config, device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq_len: int) -> torch.Tensor:
        positions = torch.arange(seq_len, dtype=torch.float32, device=self.inv_freq.device)
        angles = positions[:, None] * self.inv_freq[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=-1) * self.attention_scaling


class LgV4RopeDefaultForCausalLM(LgToyForCausalLM):
    config_class = LgV4RopeDefaultConfig

    def __init__(self, config):
        super().__init__(config)
        self.rotary = LgV4DefaultRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        embeds = self.embed_tokens(input_ids)
        rotary = self.rotary(input_ids.shape[1])  # one head's width: the same rotation for every head
        rotary = rotary.repeat(1, embeds.shape[-1] // rotary.shape[-1])
        return self.decode(embeds + (self.positions(input_ids.shape[1]) + 0.1 * rotary).to(embeds.dtype))
