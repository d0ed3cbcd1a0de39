"""A MiniCPM-V-2.6-shaped vision-language model (a loadguard zoo model; remote code).

vision tower (image slices -> patch features) -> resampler (learned queries cross-attend to them, a 2D
sin/cos ``pos_embed`` added to the keys) -> a Llama language model whose input embeddings get the resampled
image features written over each slice's placeholder span (``image_bound``).

Written like the original, for transformers 4.x:

- ``generate(input_ids, pixel_values, tgt_sizes, image_bound, attention_mask, tokenizer, ...)`` builds
  ``inputs_embeds`` under ``torch.inference_mode()`` and calls ``self.llm.generate(inputs_embeds=...)``:
  it returns the new tokens only, and needs ``tokenizer`` to find its terminators;
- ``forward`` takes the processor's output as one ``data`` dict;
- it never calls ``post_init()`` (transformers 4.x did not need it), its resampler's code relies on
  ``typing.List`` leaking from ``torch.nn.functional``, and its vision tower imports a helper from
  ``transformers.modeling_attn_mask_utils``;
- its ``_init_weights`` is the language model's: nothing rebuilds the resampler's ``pos_embed`` unless
  ``config.fixed`` is set.
"""

import torch
from transformers import LlamaForCausalLM, LlamaPreTrainedModel

from .configuration_lgminicpmv import LgMiniCPMVConfig
from .modeling_vision_lgminicpmv import LgVisionTower
from .resampler_lgminicpmv import LgResampler, get_2d_sincos_pos_embed


class LgMiniCPMVPreTrainedModel(LlamaPreTrainedModel):
    config_class = LgMiniCPMVConfig

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, LgResampler) and self.config.fixed:
            # The fix: rebuild the table that loading leaves uninitialized.
            with torch.no_grad():
                table = torch.from_numpy(get_2d_sincos_pos_embed(module.embed_dim, module.max_size))
                module.pos_embed.copy_(table.to(device=module.pos_embed.device, dtype=module.pos_embed.dtype))


class LgMiniCPMV(LgMiniCPMVPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.llm = LlamaForCausalLM(config)
        self.vpm = LgVisionTower(config)
        self.embed_dim = config.hidden_size
        self.resampler = LgResampler(
            num_queries=config.query_num,
            embed_dim=self.embed_dim,
            num_heads=config.num_attention_heads,
            kv_dim=config.vision_hidden_size,
            max_size=config.resampler_max_size,
        )
        self.terminators = ["</s>", "<|im_end|>"]
        # no self.post_init(): written for transformers 4.x

    def get_input_embeddings(self):
        return self.llm.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.llm.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.llm.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.llm.lm_head = new_embeddings

    def get_vllm_embedding(self, data):
        """Text embeddings with each image slice's resampled features written over its placeholder span."""
        embeds = self.llm.get_input_embeddings()(data["input_ids"])
        slices = [s for prompt_slices in data["pixel_values"] for s in prompt_slices]
        if not slices:
            return embeds, []
        dtype, device = embeds.dtype, embeds.device
        tgt_sizes = torch.vstack([t for t in data["tgt_sizes"] if isinstance(t, torch.Tensor) and len(t)]).to(device).long()
        patch = self.config.patch_size
        lengths = (tgt_sizes[:, 0] * tgt_sizes[:, 1]).tolist()
        longest = max(lengths)
        pixel_values = torch.zeros(len(slices), 3, patch, longest * patch, dtype=dtype, device=device)
        patch_attention_mask = torch.zeros(len(slices), longest, dtype=torch.bool, device=device)
        for index, (pixels, length) in enumerate(zip(slices, lengths)):
            pixel_values[index, :, :, : length * patch] = pixels.to(device=device, dtype=dtype)
            patch_attention_mask[index, :length] = True
        features = self.resampler(self.vpm(pixel_values, patch_attention_mask), tgt_sizes)
        vision_hidden_states = []
        start = 0
        for row, prompt_slices in enumerate(data["pixel_values"]):
            count = len(prompt_slices)
            states = features[start : start + count]
            start += count
            vision_hidden_states.append(states)
            bounds = data["image_bound"][row]
            if count == 0 or len(bounds) == 0:
                continue
            positions = torch.cat([torch.arange(int(s), int(e), device=device) for s, e in bounds.tolist()])
            values = states.reshape(-1, states.shape[-1]).to(dtype)
            if positions.numel() != values.shape[0]:
                raise ValueError(f"the prompt has {positions.numel()} image placeholder tokens but the images give {values.shape[0]} features")
            embeds[row].index_copy_(0, positions, values)
        return embeds, vision_hidden_states

    def forward(self, data, **kwargs):
        embeds, _ = self.get_vllm_embedding(data)
        return self.llm(input_ids=None, inputs_embeds=embeds, attention_mask=data.get("attention_mask"), **kwargs)

    def _decode(self, inputs_embeds, tokenizer, attention_mask, decode_text=False, **kwargs):
        terminators = [tokenizer.convert_tokens_to_ids(token) for token in self.terminators]
        output = self.llm.generate(inputs_embeds=inputs_embeds, pad_token_id=0, eos_token_id=terminators, attention_mask=attention_mask, **kwargs)
        if decode_text:
            return self._decode_text(output, tokenizer)
        return output

    def _decode_text(self, result_ids, tokenizer):
        terminators = [tokenizer.convert_tokens_to_ids(token) for token in self.terminators]
        texts = []
        for ids in result_ids:
            ids = ids[ids != 0]
            if len(ids) and int(ids[-1]) in terminators:
                ids = ids[:-1]
            texts.append(tokenizer.decode(ids).strip())
        return texts

    def generate(
        self,
        input_ids=None,
        pixel_values=None,
        tgt_sizes=None,
        image_bound=None,
        attention_mask=None,
        tokenizer=None,
        vision_hidden_states=None,
        return_vision_hidden_states=False,
        decode_text=False,
        **kwargs,
    ):
        assert input_ids is not None
        assert len(input_ids) == len(pixel_values)
        data = {"input_ids": input_ids, "pixel_values": pixel_values, "tgt_sizes": tgt_sizes, "image_bound": image_bound}
        with torch.inference_mode():
            inputs_embeds, vision_hidden_states = self.get_vllm_embedding(data)
            result = self._decode(inputs_embeds, tokenizer, attention_mask, decode_text=decode_text, **kwargs)
        if return_vision_hidden_states:
            return result, vision_hidden_states
        return result
