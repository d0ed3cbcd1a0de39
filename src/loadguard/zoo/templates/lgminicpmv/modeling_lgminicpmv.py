"""A MiniCPM-V-2.6-shaped vision-language model (a loadguard zoo model; remote code).

vision encoder (patches, no positions of its own) -> resampler (learned queries cross-attend to the
image features; a 2D sin/cos ``pos_embed`` table is added to the keys) -> tiny causal LM whose ``<slot>``
token embeddings are replaced by the resampler output.

Like the original, the resampler builds ``pos_embed`` in ``__init__`` with ``_set_2d_pos_cache`` as a
non-persistent buffer, and only rebuilds it for image grids larger than ``max_size``: a table corrupted
by loading is never refreshed.
"""


import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_lgminicpmv import LgMiniCPMVConfig


def get_2d_sincos_pos_embed(height: int, width: int, dim: int, device=None) -> torch.Tensor:
    """(height, width, dim) float32 table: [sin(w*omega), cos(w*omega), sin(h*omega), cos(h*omega)],
    omega_k = 10000^(-k / (dim/4)) for k < dim/4; w is the column, h the row."""
    quarter = dim // 4
    omega = 1.0 / (10000.0 ** (torch.arange(quarter, dtype=torch.float32, device=device) / quarter))
    rows = torch.arange(height, dtype=torch.float32, device=device)
    cols = torch.arange(width, dtype=torch.float32, device=device)
    grid_h, grid_w = torch.meshgrid(rows, cols, indexing="ij")
    out_w = grid_w[..., None] * omega
    out_h = grid_h[..., None] * omega
    return torch.cat([torch.sin(out_w), torch.cos(out_w), torch.sin(out_h), torch.cos(out_h)], dim=-1)


class LgVisionEncoder(nn.Module):
    def __init__(self, config: LgMiniCPMVConfig):
        super().__init__()
        dim = config.vision_hidden_size
        self.patch_size = config.patch_size
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=config.patch_size, stride=config.patch_size)
        self.norm_in = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.norm_out = nn.LayerNorm(dim)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """(3, H, W) -> (H/p * W/p, dim), patches row-major."""
        x = self.patch_embed(pixels[None]).flatten(2).transpose(1, 2)[0]
        x = self.norm_in(x)
        x = x + self.fc2(nn.functional.gelu(self.fc1(x)))
        return self.norm_out(x)


class LgResampler(nn.Module):
    def __init__(self, num_queries: int, embed_dim: int, num_heads: int, kv_dim: int, max_size=(70, 70)):
        super().__init__()
        self.num_queries = num_queries
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.query = nn.Parameter(torch.zeros(num_queries, embed_dim))
        self.kv_proj = nn.Linear(kv_dim, embed_dim, bias=False)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.ln_q = nn.LayerNorm(embed_dim)
        self.ln_kv = nn.LayerNorm(embed_dim)
        self.ln_post = nn.LayerNorm(embed_dim)
        self.proj = nn.Parameter(embed_dim**-0.5 * torch.randn(embed_dim, embed_dim))
        self.max_size = list(max_size)
        self._set_2d_pos_cache(self.max_size)

    def _set_2d_pos_cache(self, max_size, device="cpu"):
        pos_embed = get_2d_sincos_pos_embed(max_size[0], max_size[1], self.embed_dim, device=device)
        self.register_buffer("pos_embed", pos_embed, persistent=False)

    def _adjust_pos_cache(self, tgt_sizes: torch.Tensor, device):
        max_h = int(tgt_sizes[:, 0].max())
        max_w = int(tgt_sizes[:, 1].max())
        if max_h > self.max_size[0] or max_w > self.max_size[1]:
            self.max_size = [max(max_h, self.max_size[0]), max(max_w, self.max_size[1])]
            self._set_2d_pos_cache(self.max_size, device)

    def forward(self, features: list, tgt_sizes: torch.Tensor) -> torch.Tensor:
        """features: one (h*w, kv_dim) tensor per image; returns (num_images, num_queries, embed_dim)."""
        self._adjust_pos_cache(tgt_sizes, device=features[0].device)
        query = self.ln_q(self.query)[None]
        outputs = []
        for feature, (height, width) in zip(features, tgt_sizes.tolist()):
            kv = self.ln_kv(self.kv_proj(feature))
            pos = self.pos_embed[:height, :width, :].reshape(height * width, -1).to(kv.dtype)
            out, _ = self.attn(query, (kv + pos)[None], kv[None], need_weights=False)
            outputs.append(self.ln_post(out[0]) @ self.proj)
        return torch.stack(outputs)


class LgLMBlock(nn.Module):
    def __init__(self, config: LgMiniCPMVConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.o_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.fc_in = nn.Linear(hidden, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(batch, seq, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(out.transpose(1, 2).reshape(batch, seq, hidden))
        return x + self.fc_out(nn.functional.gelu(self.fc_in(self.ln_2(x))))


class LgMiniCPMVPreTrainedModel(PreTrainedModel):
    config_class = LgMiniCPMVConfig
    base_model_prefix = "llm"

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, LgResampler):
            nn.init.trunc_normal_(module.query, std=std)
            if self.config.fixed:
                # The fix: rebuild the table that loading leaves uninitialized.
                with torch.no_grad():
                    table = get_2d_sincos_pos_embed(*module.max_size, module.embed_dim, device=module.pos_embed.device)
                    module.pos_embed.copy_(table.to(module.pos_embed.dtype))
        elif isinstance(module, LgMiniCPMV):
            nn.init.normal_(module.embed_positions, mean=0.0, std=std)


class LgMiniCPMV(LgMiniCPMVPreTrainedModel, GenerationMixin):
    def __init__(self, config: LgMiniCPMVConfig):
        super().__init__(config)
        self.vpm = LgVisionEncoder(config)
        self.resampler = LgResampler(
            config.query_num,
            config.hidden_size,
            config.num_attention_heads,
            config.vision_hidden_size,
            max_size=config.resampler_max_size,
        )
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions = nn.Parameter(torch.zeros(config.max_position_embeddings, config.hidden_size))
        self.layers = nn.ModuleList([LgLMBlock(config) for _ in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def get_image_features(self, pixel_values: torch.Tensor, tgt_sizes: torch.Tensor) -> torch.Tensor:
        """pixel_values: (num_images, 3, H, W), padded; tgt_sizes: (num_images, 2) patch grid (rows, cols)."""
        patch = self.config.patch_size
        dtype = self.vpm.patch_embed.weight.dtype
        features = [
            self.vpm(pixels[:, : int(h) * patch, : int(w) * patch].to(dtype))
            for pixels, (h, w) in zip(pixel_values, tgt_sizes.tolist())
        ]
        return self.resampler(features, tgt_sizes)

    def generate(self, input_ids=None, pixel_values=None, tgt_sizes=None, tokenizer=None, decode_text=True, **kwargs):
        """Like MiniCPM-V 2.6's chat-style generate: returns decoded text unless ``decode_text=False``, and
        takes no ``image_sizes`` (which its processor returns): engine suites wrap it to get token ids."""
        if "image_sizes" in kwargs:
            raise TypeError("generate() got an unexpected keyword argument 'image_sizes'")
        output = super().generate(input_ids=input_ids, pixel_values=pixel_values, tgt_sizes=tgt_sizes, **kwargs)
        if not decode_text:
            return output
        if tokenizer is None:
            raise ValueError("generate() needs tokenizer= to decode text (or decode_text=False for token ids)")
        sequences = output.sequences if hasattr(output, "sequences") else output
        return tokenizer.batch_decode(sequences[:, input_ids.shape[1] :], skip_special_tokens=True)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, pixel_values=None, tgt_sizes=None, **kwargs):
        # No key/value cache: every step sees the whole sequence (and the images) again.
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "pixel_values": pixel_values, "tgt_sizes": tgt_sizes}
        if "output_hidden_states" in kwargs:
            inputs["output_hidden_states"] = kwargs["output_hidden_states"]
        return inputs

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask=None,
        pixel_values: torch.Tensor | None = None,
        tgt_sizes: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> CausalLMOutput:
        embeds = self.embed_tokens(input_ids)
        if pixel_values is not None and len(pixel_values):
            image_embeds = self.get_image_features(pixel_values, tgt_sizes) * self.config.image_scale
            slots = (input_ids == self.config.slot_token_id)[..., None].expand_as(embeds)
            image_embeds = image_embeds.reshape(-1, embeds.shape[-1]).to(embeds.dtype)
            if int(slots[..., 0].sum()) != image_embeds.shape[0]:
                raise ValueError(
                    f"the prompt has {int(slots[..., 0].sum())} <slot> tokens but the images give "
                    f"{image_embeds.shape[0]} query embeddings; build prompts with the model's processor"
                )
            embeds = embeds.masked_scatter(slots, image_embeds)
        hidden = embeds + self.embed_positions[: input_ids.shape[1]].to(embeds.dtype)
        states = [hidden]
        for layer in self.layers:
            hidden = layer(hidden)
            states.append(hidden)
        hidden = self.norm(hidden)
        states[-1] = hidden  # as in transformers models: the last hidden state is after the final norm
        wanted = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        return CausalLMOutput(logits=self.lm_head(hidden), hidden_states=tuple(states) if wanted else None)
