"""The resampler of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code).

Learned queries cross-attend to the image features; a 2D sin/cos table, ``pos_embed``, is added to the keys.
As in MiniCPM-V 2.6, the table is a non-persistent buffer built in ``__init__`` by ``_set_2d_pos_cache`` (from
numpy), and rebuilt only for image grids larger than ``max_size``: a table corrupted by loading is never
refreshed. Written, like the original, against a torch that leaked ``typing.List`` through
``from torch.nn.functional import *``.
"""

import numpy as np
import torch
from torch import nn
from torch.nn.functional import *  # noqa: F403
from torch.nn.init import trunc_normal_


def get_2d_sincos_pos_embed(embed_dim: int, image_size) -> np.ndarray:
    """(rows, cols, embed_dim) table: [sin(w*omega), cos(w*omega), sin(h*omega), cos(h*omega)],
    omega_k = 10000^(-k / (embed_dim/4)) for k < embed_dim/4; w is the column, h the row."""
    rows, cols = image_size
    quarter = embed_dim // 4
    omega = 1.0 / 10000.0 ** (np.arange(quarter, dtype=np.float32) / quarter)
    grid_h, grid_w = np.meshgrid(np.arange(rows, dtype=np.float32), np.arange(cols, dtype=np.float32), indexing="ij")
    out_w = grid_w[..., None] * omega
    out_h = grid_h[..., None] * omega
    return np.concatenate([np.sin(out_w), np.cos(out_w), np.sin(out_h), np.cos(out_h)], axis=-1).astype(np.float32)


class LgResampler(nn.Module):
    def __init__(self, num_queries: int, embed_dim: int, num_heads: int, kv_dim: int, max_size=(70, 70)):
        super().__init__()
        self.num_queries = num_queries
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.max_size = list(max_size)
        self.query = nn.Parameter(torch.zeros(num_queries, embed_dim))
        self.kv_proj = nn.Linear(kv_dim, embed_dim, bias=False)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.ln_q = nn.LayerNorm(embed_dim)
        self.ln_kv = nn.LayerNorm(embed_dim)
        self.ln_post = nn.LayerNorm(embed_dim)
        self.proj = nn.Parameter(embed_dim**-0.5 * torch.randn(embed_dim, embed_dim))
        self._set_2d_pos_cache(self.max_size)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, LgResampler):
            trunc_normal_(module.query, std=0.02)
        elif isinstance(module, nn.Linear):
            trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.constant_(module.bias, 0)
        elif isinstance(module, nn.LayerNorm):
            nn.init.constant_(module.bias, 0)
            nn.init.constant_(module.weight, 1.0)

    def _set_2d_pos_cache(self, max_size, device="cpu"):
        pos_embed = torch.from_numpy(get_2d_sincos_pos_embed(self.embed_dim, max_size)).float().to(device)
        self.register_buffer("pos_embed", pos_embed, persistent=False)

    def _adjust_pos_cache(self, tgt_sizes: torch.Tensor, device):
        max_h = int(tgt_sizes[:, 0].max())
        max_w = int(tgt_sizes[:, 1].max())
        if max_h > self.max_size[0] or max_w > self.max_size[1]:
            self.max_size = [max(max_h, self.max_size[0]), max(max_w, self.max_size[1])]
            self._set_2d_pos_cache(self.max_size, device)

    def positions_for(self, tgt_sizes: torch.Tensor, dtype) -> List[torch.Tensor]:  # noqa: F405
        """The table entries of each slice's patch grid, row-major."""
        return [self.pos_embed[:h, :w, :].reshape(h * w, -1).to(dtype) for h, w in tgt_sizes.tolist()]

    def forward(self, x: torch.Tensor, tgt_sizes: torch.Tensor) -> torch.Tensor:
        """x: (slices, max patches, kv_dim), padded; tgt_sizes: (slices, 2) patch rows and columns.
        Returns (slices, num_queries, embed_dim)."""
        self._adjust_pos_cache(tgt_sizes, device=x.device)
        lengths = (tgt_sizes[:, 0] * tgt_sizes[:, 1]).tolist()
        key_padding_mask = torch.zeros(x.shape[0], x.shape[1], dtype=torch.bool, device=x.device)
        for index, length in enumerate(lengths):
            key_padding_mask[index, length:] = True
        x = self.ln_kv(self.kv_proj(x))
        pos = nn.utils.rnn.pad_sequence(self.positions_for(tgt_sizes, x.dtype), batch_first=True)
        pos = pos[:, : x.shape[1]]
        query = self.ln_q(self.query)[None].expand(x.shape[0], -1, -1)
        out, _ = self.attn(query, x + pos, x, key_padding_mask=key_padding_mask, need_weights=False)
        return self.ln_post(out) @ self.proj
