"""Configuration of the toy LM that imports is_torch_fx_available (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4FxConfig(LgToyConfig):
    model_type = "lgv4fx"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        super().__init__(**kwargs)
