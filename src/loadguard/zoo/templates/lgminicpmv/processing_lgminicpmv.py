"""Processor (tokenizer + image processor) of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code)."""

import transformers
from transformers.feature_extraction_utils import BatchFeature
from transformers.processing_utils import ProcessorMixin

_V4 = int(transformers.__version__.split(".")[0]) < 5


class LgMiniCPMVProcessor(ProcessorMixin):
    """``processor(text=..., images=...)``: each ``<image>`` in the text stands for the next image and is
    expanded to ``<im_start>`` + ``query_num`` ``<slot>`` tokens + ``<im_end>``."""

    attributes = ["image_processor", "tokenizer"]
    if _V4:  # transformers 4.x finds sub-processors through these; 5.x reads __init__ and warns about them
        image_processor_class = "AutoImageProcessor"
        tokenizer_class = "AutoTokenizer"

    def __init__(self, image_processor=None, tokenizer=None, query_num: int = 8, **kwargs):
        self.query_num = query_num
        super().__init__(image_processor, tokenizer)

    def __call__(self, text=None, images=None, return_tensors="pt", **kwargs) -> BatchFeature:
        texts = [text] if isinstance(text, str) else list(text)
        flat_images = []
        if images is not None:
            groups = images if isinstance(images, (list, tuple)) else [images]
            for group in groups:
                flat_images.extend(group if isinstance(group, (list, tuple)) else [group])
        placeholders = sum(t.count("<image>") for t in texts)
        if placeholders != len(flat_images):
            raise ValueError(f"the text has {placeholders} <image> placeholders but {len(flat_images)} images were given")
        expansion = " <im_start> " + "<slot> " * self.query_num + "<im_end> "
        texts = [" ".join(t.replace("<image>", expansion).split()) for t in texts]
        data = dict(self.tokenizer(texts, return_tensors=return_tensors, padding=len(texts) > 1))
        if flat_images:
            data.update(self.image_processor(flat_images, return_tensors=return_tensors))
        return BatchFeature(data=data)

    @property
    def model_input_names(self):
        return ["input_ids", "attention_mask", "pixel_values", "tgt_sizes"]
