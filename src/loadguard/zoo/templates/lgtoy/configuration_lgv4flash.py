"""Configuration of the toy LM that imports LlamaFlashAttention2 (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4FlashConfig(LgToyConfig):
    model_type = "lgv4flash"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
