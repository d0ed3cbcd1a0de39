"""Configuration of the toy LM that imports transformers.modeling_attn_mask_utils (a loadguard zoo model;
remote code). A model type of its own, so transformers registers its own remote class for it."""

from .configuration_lgtoy import LgToyConfig


class LgV4MaskConfig(LgToyConfig):
    model_type = "lgv4mask"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
