"""Configuration of a toy LM whose position table is rebuilt on first use (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgRebuiltConfig(LgToyConfig):
    model_type = "lgrebuilt"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
