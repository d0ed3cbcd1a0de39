"""Configuration of a toy LM written for transformers 4.x (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4RopeDefaultConfig(LgToyConfig):
    model_type = "lgv4ropedefault"

    def __init__(self, rope_theta: float = 10000.0, **kwargs):  # its own __init__: see configuration_lgtoy
        self.rope_theta = rope_theta
        super().__init__(**kwargs)
