"""The toy causal LM as remote code that sizes its generation cache from ``config.max_length`` (a loadguard zoo
model; remote code), a generation default every transformers 4.x config carried (20).

transformers 5 configs no longer have it: constructing the model raises ``AttributeError``.
"""

from .configuration_lgv4gen import LgV4GenConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4GenForCausalLM(LgToyForCausalLM):
    config_class = LgV4GenConfig

    def __init__(self, config):
        super().__init__(config)
        self.cache_length = max(config.max_length, config.max_position_embeddings)
