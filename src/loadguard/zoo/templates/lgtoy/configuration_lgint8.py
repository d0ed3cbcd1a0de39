"""Configuration of a toy LM published as an int8 checkpoint by its own code (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgInt8Config(LgToyConfig):
    model_type = "lgint8"

    def __init__(self, quantization_bits: int = 8, **kwargs):  # its own __init__: a dataclass without the toy's fields otherwise
        self.quantization_bits = quantization_bits
        super().__init__(**kwargs)
