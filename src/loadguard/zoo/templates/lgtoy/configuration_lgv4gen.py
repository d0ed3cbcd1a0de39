"""Configuration of the toy LM that reads config.max_length (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4GenConfig(LgToyConfig):
    model_type = "lgv4gen"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
