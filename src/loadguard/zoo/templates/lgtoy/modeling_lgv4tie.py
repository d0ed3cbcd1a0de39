"""The toy causal LM as remote code that overrides ``tie_weights(self)`` the 4.x way (a loadguard zoo model; remote
code): transformers 5 calls ``tie_weights(missing_keys=..., recompute_mapping=...)`` while loading, which raises
``TypeError``.
"""

from .configuration_lgv4tie import LgV4TieConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4TieForCausalLM(LgToyForCausalLM):
    config_class = LgV4TieConfig

    def tie_weights(self):
        if getattr(self.config, "tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
