"""Processor (tokenizer + image processor) of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code).

As MiniCPM-V 2.6's: each ``(<image>./</image>)`` in a prompt stands for the next image and becomes
``<image>`` + ``image_feature_size`` × ``<unk>`` + ``</image>``, followed by a ``<slice>`` ... ``</slice>``
span per slice of a large image. ``image_bound`` gives each span's [start, end) token positions: where the
model writes the resampled image features. Prompts are left-padded with id 0.
"""

import re

import torch
import transformers
from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin

_V4 = int(transformers.__version__.split(".")[0]) < 5
PATTERN = "(<image>./</image>)"


class LgMiniCPMVProcessor(ProcessorMixin):
    attributes = ["image_processor", "tokenizer"]
    if _V4:  # transformers 4.x finds sub-processors through these; 5.x reads __init__ and warns about them
        image_processor_class = "AutoImageProcessor"
        tokenizer_class = "AutoTokenizer"

    def __init__(self, image_processor=None, tokenizer=None, **kwargs):
        super().__init__(image_processor, tokenizer)

    def __call__(self, text=None, images=None, max_slice_nums=None, return_tensors="pt", **kwargs) -> BatchFeature:
        texts = [text] if isinstance(text, str) else list(text)
        if images is None:
            per_prompt = [[] for _ in texts]
        elif len(texts) == 1 and (not isinstance(images, (list, tuple)) or not images or not isinstance(images[0], (list, tuple))):
            per_prompt = [list(images) if isinstance(images, (list, tuple)) else [images]]
        else:
            per_prompt = [list(group) for group in images]
        if len(per_prompt) != len(texts):
            raise ValueError(f"{len(texts)} prompts but images for {len(per_prompt)}")
        image_inputs = self.image_processor(per_prompt, max_slice_nums=max_slice_nums) if any(per_prompt) else None
        ids_list, bounds_list = [], []
        for prompt, prompt_images in zip(texts, per_prompt):
            tags = re.findall(re.escape(PATTERN), prompt)
            if len(tags) != len(prompt_images):
                raise ValueError(f"the prompt has {len(tags)} {PATTERN} placeholders but {len(prompt_images)} images were given")
            chunks = prompt.split(PATTERN)
            final = chunks[0]
            for image, chunk in zip(prompt_images, chunks[1:]):
                final += " " + self.image_processor.placeholder(image.size, max_slice_nums) + " " + chunk
            ids = torch.tensor(self.tokenizer.encode(" ".join(final.split()), add_special_tokens=False), dtype=torch.long)
            ids_list.append(ids)
            bounds_list.append(self._bounds(ids))
        longest = max(len(ids) for ids in ids_list)
        input_ids = torch.zeros(len(ids_list), longest, dtype=torch.long)
        for row, ids in enumerate(ids_list):
            pad = longest - len(ids)
            input_ids[row, pad:] = ids
            bounds_list[row] = bounds_list[row] + pad
        data = {"input_ids": input_ids, "attention_mask": input_ids.ne(0).long(), "image_bound": bounds_list}
        if image_inputs is not None:
            data.update(image_inputs)
        else:
            data.update({"pixel_values": [[] for _ in texts], "tgt_sizes": [torch.zeros(0, 2, dtype=torch.int32) for _ in texts], "image_sizes": [[] for _ in texts]})
        return BatchFeature(data=data)

    def _bounds(self, ids: torch.Tensor) -> torch.Tensor:
        """(spans, 2): the first placeholder position after each <image>/<slice>, and its closing tag's position."""
        token = self.tokenizer.convert_tokens_to_ids
        starts = torch.where((ids == token("<image>")) | (ids == token("<slice>")))[0] + 1
        ends = torch.where((ids == token("</image>")) | (ids == token("</slice>")))[0]
        return torch.stack([starts, ends], dim=-1) if len(starts) else torch.zeros(0, 2, dtype=torch.long)

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)

    @property
    def model_input_names(self):
        return ["input_ids", "attention_mask", "pixel_values", "tgt_sizes", "image_bound"]
