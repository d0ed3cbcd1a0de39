"""Configuration of the toy LM written for transformers 4.x (a loadguard zoo model; remote code).

A model type of its own, so transformers does not reuse another toy's registered class for it.
"""

from .configuration_lgtoy import LgToyConfig


class LgV4Config(LgToyConfig):
    model_type = "lgv4"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
