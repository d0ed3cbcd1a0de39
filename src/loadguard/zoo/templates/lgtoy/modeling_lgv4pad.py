"""The toy causal LM as remote code that reads ``config.pad_token_id`` (a loadguard zoo model; remote code): every
transformers 4.x config carried it (None by default); transformers 5 configs do not, so constructing the model
raises ``AttributeError``.
"""

from .configuration_lgv4pad import LgV4PadConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4PadForCausalLM(LgToyForCausalLM):
    config_class = LgV4PadConfig

    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id if config.pad_token_id is not None else 0
