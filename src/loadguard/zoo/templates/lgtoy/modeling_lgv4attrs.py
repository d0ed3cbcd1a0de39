"""The toy causal LM as remote code that builds its head mask with ``self.get_head_mask`` (a loadguard zoo model;
remote code), a method every transformers 4.x model had and 5 removed: constructing the model raises
``AttributeError``.
"""

from .configuration_lgv4attrs import LgV4AttrsConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4AttrsForCausalLM(LgToyForCausalLM):
    config_class = LgV4AttrsConfig

    def __init__(self, config):
        super().__init__(config)
        self.default_head_mask = self.get_head_mask(None, config.num_hidden_layers)
