"""The toy causal LM as remote code that maps attention implementations to transformers' Llama attention
classes, ``LlamaFlashAttention2`` among them (a loadguard zoo model; remote code), as DeepSeek-OCR's code does.

Current transformers has one ``LlamaAttention`` for every kernel: importing this file raises ``ImportError``.
"""

from transformers.models.llama.modeling_llama import LlamaAttention, LlamaFlashAttention2

from .configuration_lgv4flash import LgV4FlashConfig
from .modeling_lgtoy import LgToyForCausalLM

ATTENTION_CLASSES = {"eager": LlamaAttention, "flash_attention_2": LlamaFlashAttention2}


class LgV4FlashForCausalLM(LgToyForCausalLM):
    config_class = LgV4FlashConfig
