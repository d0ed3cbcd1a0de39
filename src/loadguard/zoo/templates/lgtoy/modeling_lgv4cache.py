"""The toy causal LM as remote code that speaks the legacy cache format at its boundary, as 4.3x-4.5x remote code did
(``DynamicCache.from_legacy_cache`` in, ``to_legacy_cache()`` out; a loadguard zoo model; remote code): it loads and
runs a forward pass, and ``generate`` raises ``AttributeError`` on transformers 5, which removed both (its buffers are
not rebuilt either).
"""

from transformers import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_lgv4cache import LgV4CacheConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4CacheForCausalLM(LgToyForCausalLM):
    config_class = LgV4CacheConfig

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, **kwargs):
        # every step sees the whole sequence again; the cache only crosses the boundary, as a legacy tuple
        return {"input_ids": input_ids, "attention_mask": attention_mask, "past_key_values": past_key_values, "use_cache": True}

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, **kwargs):
        output = super().forward(input_ids, attention_mask)
        if not use_cache:
            return output
        if not isinstance(past_key_values, DynamicCache):
            past_key_values = DynamicCache.from_legacy_cache(past_key_values or ())
        return CausalLMOutputWithPast(logits=output.logits, past_key_values=past_key_values.to_legacy_cache())
