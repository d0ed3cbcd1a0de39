"""The toy causal LM as remote code that asks ``transformers.utils.is_torch_fx_available()`` before marking a
helper as a leaf for torch.fx tracing (a loadguard zoo model; remote code), as DeepSeek-V2/V3 and Kimi-K2 do.

transformers 5 removed ``is_torch_fx_available``: importing this file raises ``ImportError``.
"""

import torch
from transformers.utils import is_torch_fx_available

from .configuration_lgv4fx import LgV4FxConfig
from .modeling_lgtoy import LgToyForCausalLM


def scaled_logits(logits: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return logits * scale


if is_torch_fx_available():
    scaled_logits = torch.fx.wrap(scaled_logits)


class LgV4FxForCausalLM(LgToyForCausalLM):
    config_class = LgV4FxConfig
