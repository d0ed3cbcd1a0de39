"""The toy causal LM as remote code that imports ``find_pruneable_heads_and_indices`` and ``prune_linear_layer`` from
``transformers.pytorch_utils`` (a loadguard zoo model; remote code), as BERT-style remote code does: transformers 5
removed them, so the import raises ``ImportError``.
"""

from transformers.pytorch_utils import find_pruneable_heads_and_indices, prune_linear_layer

from .configuration_lgv4names import LgV4NamesConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4NamesForCausalLM(LgToyForCausalLM):
    config_class = LgV4NamesConfig

    def prune_head_rows(self, layer: int, heads: list[int]):
        """Drop attention heads from one layer's output projection, as 4.x BERT code did."""
        attention = self.layers[layer].attn
        heads, index = find_pruneable_heads_and_indices(heads, attention.num_heads, attention.head_dim, set())
        attention.o_proj = prune_linear_layer(attention.o_proj, index, dim=1)
