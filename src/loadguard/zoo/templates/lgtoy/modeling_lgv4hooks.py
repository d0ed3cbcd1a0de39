"""The toy causal LM as remote code written for transformers 4.41 in ChatGLM's way (a loadguard zoo model; remote code):
it keeps its own past (a tuple: how many tokens it has seen), takes it back in its own
``_update_model_kwargs_for_generation`` through ``GenerationMixin._extract_past_from_model_output`` (removed in 4.47),
grows the attention mask it is handed, and its config says ``num_layers``. It loads and runs a forward pass;
``generate`` raises ``AttributeError`` on transformers 5 (building its default cache, which asks the config for
``num_hidden_layers``; in the hook; then on the mask 5.x drops when it is all ones).
Its buffers are not rebuilt either.
"""

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_lgv4hooks import LgV4HooksConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4HooksForCausalLM(LgToyForCausalLM):
    config_class = LgV4HooksConfig

    def __init__(self, config: LgV4HooksConfig):
        config.num_hidden_layers = config.num_layers  # the toy builds its layers from it
        try:
            super().__init__(config)
        finally:
            del config.num_hidden_layers

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask, "past_key_values": past_key_values, "use_cache": True}

    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, is_encoder_decoder=False, standardize_cache_format=False):
        model_kwargs["past_key_values"] = self._extract_past_from_model_output(outputs, standardize_cache_format=standardize_cache_format)
        if "attention_mask" in model_kwargs:
            mask = model_kwargs["attention_mask"]
            model_kwargs["attention_mask"] = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        return model_kwargs

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, **kwargs):
        if past_key_values is not None and int(past_key_values[0]) != input_ids.shape[1] - 1:
            raise ValueError(f"a past of {past_key_values[0]} tokens for {input_ids.shape[1]} input ids")
        output = super().forward(input_ids, attention_mask)
        if not use_cache:
            return output
        return CausalLMOutputWithPast(logits=output.logits, past_key_values=(torch.tensor(input_ids.shape[1]),))
