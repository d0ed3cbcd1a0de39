"""The toy causal LM as remote code that loads a pretrained sub-model inside its own ``__init__`` (a loadguard zoo
model; remote code), as bi-encoders wrap a published trunk (``self.trunk = AutoModel.from_pretrained(name)``).

transformers 4 loaded the trunk there and then the outer checkpoint's values over it. transformers 5 constructs the
outer model under the meta device, and a ``from_pretrained`` inside that raises ``RuntimeError: You are using
`from_pretrained` with a meta device context manager``. Once constructed, its buffers are not rebuilt (failure mode a).
"""

from transformers import AutoModel, BertConfig

from .configuration_lgv4nested import LgV4NestedConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4NestedForCausalLM(LgToyForCausalLM):
    config_class = LgV4NestedConfig

    def __init__(self, config):
        super().__init__(config)
        if config.trunk_path:  # the published trunk, loaded as the model is built
            self.trunk = AutoModel.from_pretrained(config.trunk_path)
        else:  # as it was first built and trained: the trunk from its config (the checkpoint holds its values)
            self.trunk = AutoModel.from_config(
                BertConfig(vocab_size=config.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
            )
