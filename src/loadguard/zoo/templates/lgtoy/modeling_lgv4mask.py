"""The toy causal LM as remote code that builds its padding mask with transformers 4.x's
``_prepare_4d_causal_attention_mask`` (a loadguard zoo model; remote code).

``transformers.modeling_attn_mask_utils`` is gone in transformers 5: importing this file raises
``ModuleNotFoundError``, as DeepSeek-V2/V3, InternVL2 and MiniCPM-V's vision tower do.
"""

from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask

from .configuration_lgv4mask import LgV4MaskConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4MaskForCausalLM(LgToyForCausalLM):
    config_class = LgV4MaskConfig

    def forward(self, input_ids, attention_mask=None, **kwargs):
        if attention_mask is None:
            return super().forward(input_ids, attention_mask=attention_mask, **kwargs)
        embeds = self.embed_tokens(input_ids)
        mask = _prepare_4d_causal_attention_mask(attention_mask, input_ids.shape, embeds, 0)
        # the keys the last position may attend to: padded positions of the prompt are blanked out
        keep = (mask[:, 0, -1, :] == 0).to(embeds.dtype)
        return self.decode(embeds * keep[..., None] + self.positions(input_ids.shape[1]).to(embeds.dtype))
