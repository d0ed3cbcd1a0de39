"""The toy causal LM as remote code written for transformers 4.x (a loadguard zoo model; remote code).

It declares ``_tied_weights_keys`` as a v4 list and never calls ``post_init()`` (4.x did not need it),
so transformers 5 fails with ``'LgV4ForCausalLM' object has no attribute 'all_tied_weights_keys'``.
"""

from torch import nn

from .configuration_lgv4 import LgV4Config
from .modeling_lgtoy import LgToyBlock, LgToyForCausalLM, LgToyPositions, LgToyPreTrainedModel


class LgV4ForCausalLM(LgToyForCausalLM):
    config_class = LgV4Config
    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config):
        LgToyPreTrainedModel.__init__(self, config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = LgToyPositions(config)
        self.layers = nn.ModuleList([LgToyBlock(config) for _ in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.logit_scale = None
        # no self.post_init(): written for transformers 4.x

    def get_output_embeddings(self):
        return self.lm_head
