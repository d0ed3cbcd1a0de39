"""The vision tower of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code).

Like MiniCPM-V 2.6's SigLIP tower, it encodes a padded batch of image slices, each given as its patches in
a row (3, patch, patches * patch), and builds the padding mask with transformers 4.x's
``_prepare_4d_attention_mask``. It has no positions of its own: the resampler's ``pos_embed`` is what
tells one image region from another.
"""

import torch
from torch import nn
from transformers.modeling_attn_mask_utils import _prepare_4d_attention_mask


class LgVisionTower(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.vision_hidden_size
        self.patch_size = config.patch_size
        self.num_heads = config.vision_num_heads
        self.embed_dim = dim
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=config.patch_size, stride=config.patch_size)
        self.norm_in = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm_mlp = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.norm_out = nn.LayerNorm(dim)

    def forward(self, pixel_values: torch.Tensor, patch_attention_mask: torch.Tensor) -> torch.Tensor:
        """pixel_values: (slices, 3, patch, max patches * patch); patch_attention_mask: (slices, max patches)
        bool. Returns (slices, max patches, dim)."""
        x = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
        batch, length, dim = x.shape
        heads = self.num_heads
        mask = _prepare_4d_attention_mask(patch_attention_mask.to(x.dtype), x.dtype)
        q, k, v = self.qkv(self.norm_in(x)).view(batch, length, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, dim))
        x = x + self.fc2(nn.functional.gelu(self.fc1(self.norm_mlp(x))))
        return self.norm_out(x)
