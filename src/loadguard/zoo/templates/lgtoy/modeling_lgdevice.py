"""The toy causal LM as remote code that picks its own device (a loadguard zoo model; remote code), as OLMo-style
code does with ``config.init_device``: every layer is built with ``device=...`` explicitly, outside any device context
a loader sets up, so a weightless construction would allocate the whole model for real. Its buffers are not rebuilt.
"""

from torch import nn

from .configuration_lgdevice import LgDeviceConfig
from .modeling_lgtoy import LgToyForCausalLM, LgToyPositions


class LgDeviceForCausalLM(LgToyForCausalLM):
    config_class = LgDeviceConfig

    def __init__(self, config):
        super().__init__(config)
        device = config.init_device
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, device=device)
        for layer in self.layers:
            layer.fc_in = nn.Linear(config.hidden_size, config.intermediate_size, device=device)
            layer.fc_out = nn.Linear(config.intermediate_size, config.hidden_size, device=device)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device=device)
        self.positions = LgToyPositions(config)
        self.post_init()
