"""The toy causal LM with a CodeGen-style attention scale kept as a plain tensor attribute of a module whose
parameters all load (a loadguard zoo model; remote code), as published CodeGen2 code keeps ``scale_attn``:

    self.qkv_proj = nn.Linear(...)
    self.scale_attn = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32)).to(torch.get_default_dtype())

transformers 5 constructs it on the meta device and, the module's parameters all loaded, never calls ``_init_weights``
for it: the attribute stays on meta, and a branch of ``_init_weights`` for the class would never run.
"""

import torch
from torch import nn

from .configuration_lgcodegen import LgCodegenConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgScaledProjection(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.scale_attn = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32)).to(torch.get_default_dtype())

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.qkv_proj(hidden) / self.scale_attn.to(hidden.device)


class LgCodegenForCausalLM(LgToyForCausalLM):
    config_class = LgCodegenConfig

    def __init__(self, config):
        super().__init__(config)
        self.scaled = LgScaledProjection(config)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        embeds = self.embed_tokens(input_ids)
        return self.decode(embeds + self.positions(input_ids.shape[1]).to(embeds.dtype) + 0.1 * self.scaled(embeds))
