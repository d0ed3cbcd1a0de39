"""The toy causal LM as remote code whose forward builds its head mask with ``self.get_head_mask`` (a loadguard zoo
model; remote code), a method every transformers 4.x model had and 5 removed: it loads, and its forward raises
``AttributeError`` on transformers 5 (its buffers are not rebuilt either).
"""

from transformers.modeling_outputs import CausalLMOutput

from .configuration_lgv4fwd import LgV4FwdConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4FwdForCausalLM(LgToyForCausalLM):
    config_class = LgV4FwdConfig

    def forward(self, input_ids, attention_mask=None, head_mask=None, **kwargs):
        head_mask = self.get_head_mask(head_mask, self.config.num_hidden_layers)
        hidden = self.embed_tokens(input_ids) + self.positions(input_ids.shape[1]).to(self.embed_tokens.weight.dtype)
        for layer, layer_mask in zip(self.layers, head_mask):
            hidden = layer(hidden) if layer_mask is None else layer(hidden) * layer_mask
        logits = self.lm_head(self.norm(hidden))
        if self.logit_scale is not None:
            logits = logits * self.logit_scale.exp()
        return CausalLMOutput(logits=logits)
