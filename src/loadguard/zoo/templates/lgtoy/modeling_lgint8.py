"""The toy causal LM as an int8 checkpoint whose remote code quantizes itself (a loadguard zoo model; remote code),
as CodeGen- and ChatGLM-era int8 releases do: every linear layer of the blocks is replaced in ``__init__`` by a module
that keeps its int8 weight and per-row scales as persistent buffers made with ``torch.zeros``/``torch.ones``, outside
anything a loader puts on the meta device, and dequantizes in ``forward``. No quantization backend, no
``quantization_config``: to transformers they are ordinary buffers in the checkpoint. Its buffers are not rebuilt.
"""

import torch
from torch import nn

from .configuration_lgint8 import LgInt8Config
from .modeling_lgtoy import LgToyForCausalLM


class LgInt8Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros((out_features, in_features), dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(x.dtype) * self.weight_scale.to(x.dtype)[:, None]
        return nn.functional.linear(x, weight, self.bias)


def _quantize(layer: nn.Linear) -> LgInt8Linear:
    return LgInt8Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)


class LgInt8ForCausalLM(LgToyForCausalLM):
    config_class = LgInt8Config

    def __init__(self, config):
        super().__init__(config)
        for layer in self.layers:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                setattr(layer.attn, name, _quantize(getattr(layer.attn, name)))
            layer.fc_in, layer.fc_out = _quantize(layer.fc_in), _quantize(layer.fc_out)
