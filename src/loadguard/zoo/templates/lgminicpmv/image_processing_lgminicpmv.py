"""Image processor of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code).

As MiniCPM-V 2.6's: an image whose area exceeds ``scale_resolution``² is sliced. The whole image, resized
to about that area, comes first; then a grid of slices (at most ``max_slice_nums``, the grid whose aspect
ratio is closest to the image's) cut from the image resized to fit the grid. Every side is a multiple of
``patch_size``. Each slice is returned with its patches in a row, (3, patch, patches * patch), its patch
grid in ``tgt_sizes`` and, per prompt, everything in lists.
"""

import math

import numpy as np
import torch
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


class LgMiniCPMVImageProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values", "tgt_sizes"]

    def __init__(self, patch_size: int = 4, scale_resolution: int = 32, max_slice_nums: int = 4, image_feature_size: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.scale_resolution = scale_resolution
        self.max_slice_nums = max_slice_nums
        self.image_feature_size = image_feature_size
        self.im_start_token, self.im_end_token = "<image>", "</image>"
        self.slice_start_token, self.slice_end_token = "<slice>", "</slice>"
        self.unk_token = "<unk>"

    def _multiple_of_patch(self, length: float) -> int:
        return max(round(length / self.patch_size) * self.patch_size, self.patch_size)

    def best_resize(self, size, upscale: bool = False):
        """(width, height) of about scale_resolution² pixels with the same aspect, sides multiples of the patch."""
        width, height = size
        if width * height > self.scale_resolution**2 or upscale:
            ratio = width / height
            height = self.scale_resolution / math.sqrt(ratio)
            width = height * ratio
        return self._multiple_of_patch(width), self._multiple_of_patch(height)

    def slice_grid(self, size, max_slice_nums=None):
        """(columns, rows) of the slices of an image of ``size`` (width, height), or None when it is not sliced."""
        limit = max_slice_nums or self.max_slice_nums
        width, height = size
        multiple = min(math.ceil(width * height / self.scale_resolution**2), limit)
        if multiple <= 1:
            return None
        candidates = []
        for count in (multiple - 1, multiple, multiple + 1):
            if 1 < count <= limit:
                candidates += [(columns, count // columns) for columns in range(1, count + 1) if count % columns == 0]
        aspect = math.log(width / height)
        return min(candidates, key=lambda grid: abs(aspect - math.log(grid[0] / grid[1])))

    def slices(self, image, max_slice_nums=None):
        """The whole image resized, then each slice, row by row."""
        from PIL import Image

        grid = self.slice_grid(image.size, max_slice_nums)
        if grid is None:
            return [image.resize(self.best_resize(image.size, upscale=True), Image.BICUBIC)], None
        source = image.resize(self.best_resize(image.size), Image.BICUBIC)
        columns, rows = grid
        cell = self.best_resize((image.size[0] / columns, image.size[1] / rows), upscale=True)
        refined = image.resize((cell[0] * columns, cell[1] * rows), Image.BICUBIC)
        pieces = [refined.crop((c * cell[0], r * cell[1], (c + 1) * cell[0], (r + 1) * cell[1])) for r in range(rows) for c in range(columns)]
        return [source] + pieces, grid

    def placeholder(self, size, max_slice_nums=None) -> str:
        """The tokens that stand for one image in the prompt: the whole image, then one span per slice."""
        unk = " ".join([self.unk_token] * self.image_feature_size)
        text = f"{self.im_start_token} {unk} {self.im_end_token}"
        grid = self.slice_grid(size, max_slice_nums)
        if grid is not None:
            text += "".join(f" {self.slice_start_token} {unk} {self.slice_end_token}" for _ in range(grid[0] * grid[1]))
        return text

    def patches_in_a_row(self, image) -> tuple:
        """(3, patch, rows * cols * patch) normalized to [-1, 1], and the patch grid (rows, cols)."""
        array = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32) / 127.5 - 1.0).permute(2, 0, 1)
        p = self.patch_size
        rows, cols = array.shape[1] // p, array.shape[2] // p
        row = array.reshape(3, rows, p, cols, p).permute(0, 2, 1, 3, 4).reshape(3, p, rows * cols * p)
        return row.contiguous(), (rows, cols)

    def preprocess(self, images, return_tensors=None, max_slice_nums=None, **kwargs) -> BatchFeature:
        """``images``: one list of PIL images per prompt (a flat list or one image: a single prompt)."""
        from PIL import Image

        if isinstance(images, Image.Image):
            images = [[images]]
        elif images and isinstance(images[0], Image.Image):
            images = [list(images)]
        pixel_values, tgt_sizes, image_sizes = [], [], []
        for prompt_images in images:
            rows, grids = [], []
            for image in prompt_images:
                for piece in self.slices(image.convert("RGB"), max_slice_nums)[0]:
                    row, grid = self.patches_in_a_row(piece)
                    rows.append(row)
                    grids.append(grid)
            pixel_values.append(rows)
            tgt_sizes.append(torch.tensor(grids, dtype=torch.int32).reshape(-1, 2))
            image_sizes.append([image.size for image in prompt_images])
        return BatchFeature(data={"pixel_values": pixel_values, "tgt_sizes": tgt_sizes, "image_sizes": image_sizes})
