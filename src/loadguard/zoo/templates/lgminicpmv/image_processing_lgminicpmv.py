"""Image processor of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code)."""

import numpy as np
import torch
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


class LgMiniCPMVImageProcessor(BaseImageProcessor):
    """Resizes each image to a patch grid (longest side ``max_grid`` patches, aspect kept), normalizes to
    [-1, 1] and pads the batch. Returns ``pixel_values`` (n, 3, H, W), ``tgt_sizes`` (n, 2) patch rows and
    columns, and ``image_sizes`` (n, 2) original heights and widths."""

    model_input_names = ["pixel_values", "tgt_sizes"]

    def __init__(self, patch_size: int = 4, max_grid: int = 16, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.max_grid = max_grid

    def grid_for(self, width: int, height: int) -> tuple:
        scale = self.max_grid / max(width, height)
        return max(1, round(height * scale)), max(1, round(width * scale))

    def preprocess(self, images, return_tensors=None, **kwargs) -> BatchFeature:
        from PIL import Image

        if isinstance(images, Image.Image):
            images = [images]
        arrays, grids, sizes = [], [], []
        for image in images:
            image = image.convert("RGB")
            rows, cols = self.grid_for(*image.size)
            resized = image.resize((cols * self.patch_size, rows * self.patch_size), Image.BILINEAR)
            array = np.asarray(resized, dtype=np.float32) / 127.5 - 1.0
            arrays.append(torch.from_numpy(array).permute(2, 0, 1))
            grids.append([rows, cols])
            sizes.append([image.size[1], image.size[0]])
        height = max(a.shape[1] for a in arrays)
        width = max(a.shape[2] for a in arrays)
        pixel_values = torch.zeros(len(arrays), 3, height, width)
        for index, array in enumerate(arrays):
            pixel_values[index, :, : array.shape[1], : array.shape[2]] = array
        data = {
            "pixel_values": pixel_values,
            "tgt_sizes": torch.tensor(grids, dtype=torch.long),
            "image_sizes": torch.tensor(sizes, dtype=torch.long),
        }
        return BatchFeature(data=data, tensor_type=return_tensors)
