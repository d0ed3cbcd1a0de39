"""The loadguard toy causal LM (a loadguard zoo model; remote code).

Written the way many remote-code models are: buffers computed in ``__init__`` and an ``_init_weights``
that only knows the layer types it was written for. Which of its buffers survive
``from_pretrained`` depends on the installed transformers and on the flags in the config.
"""

import math

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_lgtoy import LgToyConfig


def sincos_table(num_positions: int, dim: int, device=None) -> torch.Tensor:
    """Absolute sin/cos position table of shape (num_positions, dim), float32."""
    position = torch.arange(num_positions, dtype=torch.float32, device=device)[:, None]
    omega = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    angles = position * omega
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def causal_mask(size: int, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


class LgToyPositions(nn.Module):
    def __init__(self, config: LgToyConfig):
        super().__init__()
        self.num_positions = config.max_position_embeddings
        self.dim = config.hidden_size
        self.register_buffer("table", sincos_table(self.num_positions, self.dim), persistent=False)
        self.register_buffer("index", torch.arange(self.num_positions, dtype=torch.long), persistent=False)
        if config.rotary_as_attribute:  # neither a parameter nor a buffer: nothing in transformers looks after it
            self.inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim))

    def forward(self, seq_len: int) -> torch.Tensor:
        table = self.table[self.index[:seq_len]]
        if getattr(self, "inv_freq", None) is None:
            return table
        angles = torch.arange(seq_len, dtype=torch.float32, device=table.device)[:, None] * self.inv_freq.to(table.device)
        return table + 0.1 * torch.cat([angles.sin(), angles.cos()], dim=-1)


class LgToyAttention(nn.Module):
    def __init__(self, config: LgToyConfig, shared_mask: torch.Tensor | None = None):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.o_proj = nn.Linear(hidden, hidden)
        mask = shared_mask if shared_mask is not None else causal_mask(config.max_position_embeddings)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape

        def heads(t):
            return t.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~self.causal_mask[:seq, :seq], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, hidden))


class LgToyBlock(nn.Module):
    def __init__(self, config: LgToyConfig, shared_mask: torch.Tensor | None = None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size)
        self.attn = LgToyAttention(config, shared_mask)
        self.ln_2 = nn.LayerNorm(config.hidden_size)
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_out(nn.functional.gelu(self.fc_in(self.ln_2(x))))


class LgToyScaledLinear(nn.Linear):
    """A bias-free linear layer whose output is multiplied by a constant kept as a buffer."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__(in_features, out_features, bias=False)
        self.scale_value = scale
        self.register_buffer("scale", torch.full((), scale, dtype=torch.float32), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


class LgToyPreTrainedModel(PreTrainedModel):
    config_class = LgToyConfig
    base_model_prefix = "model"

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            if self.config.unguarded_init:
                # Writing through .data bypasses transformers' "already loaded" guard (failure mode e).
                module.weight.data.normal_(mean=0.0, std=std)
                if module.bias is not None:
                    module.bias.data.zero_()
            else:
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        if not self.config.rebuild_buffers_in_init:
            return
        # The clean model: every non-persistent buffer and bare parameter is rebuilt here.
        with torch.no_grad():
            if isinstance(module, LgToyPositions):
                module.table.copy_(sincos_table(module.num_positions, module.dim, module.table.device))
                module.index.copy_(torch.arange(module.num_positions, device=module.index.device))
            elif isinstance(module, LgToyAttention):
                module.causal_mask.copy_(causal_mask(module.causal_mask.shape[0], module.causal_mask.device))
            if isinstance(module, LgToyScaledLinear):
                module.scale.fill_(module.scale_value)
        # No branch for ``logit_scale``: a checkpoint without it leaves it as uninitialized memory (mode d).


class LgToyForCausalLM(LgToyPreTrainedModel, GenerationMixin):
    def __init__(self, config: LgToyConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = LgToyPositions(config)
        shared = causal_mask(config.max_position_embeddings) if config.share_causal_mask else None
        self.layers = nn.ModuleList([LgToyBlock(config, shared) for _ in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        if config.scaled_lm_head:
            self.lm_head = LgToyScaledLinear(config.hidden_size, config.vocab_size, 1.0 / math.sqrt(config.hidden_size))
        else:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # A learned temperature, like CLIP's logit_scale: a bare parameter outside any standard layer.
        self.logit_scale = nn.Parameter(torch.full((), math.log(4.0))) if config.use_logit_scale else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No key/value cache: every step sees the whole sequence again.
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs) -> CausalLMOutput:
        hidden = self.embed_tokens(input_ids) + self.positions(input_ids.shape[1]).to(self.embed_tokens.weight.dtype)
        return self.decode(hidden)

    def decode(self, hidden: torch.Tensor) -> CausalLMOutput:
        """The layers and the head, from the input embeddings."""
        for layer in self.layers:
            hidden = layer(hidden)
        logits = self.lm_head(self.norm(hidden))
        if self.logit_scale is not None:
            logits = logits * self.logit_scale.exp()
        return CausalLMOutput(logits=logits)
