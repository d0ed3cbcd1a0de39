"""Configuration of the toy LM whose modeling code fails to import (a loadguard zoo model; remote code).

A model type of its own: transformers registers remote classes per config class, so sharing the toy's
would make a process that loaded the toy before reuse the toy's (importable) class for this model.
"""

from .configuration_lgtoy import LgToyConfig


class LgTypingConfig(LgToyConfig):
    model_type = "lgtyping"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
