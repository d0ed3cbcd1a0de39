"""Configuration of a toy LM written for transformers 4.x (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4CacheConfig(LgToyConfig):
    model_type = "lgv4cache"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
