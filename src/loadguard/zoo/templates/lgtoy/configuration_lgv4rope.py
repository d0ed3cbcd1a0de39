"""Configuration of the toy LM with v4-style rotary settings (a loadguard zoo model; remote code).

Like transformers 4.x remote configs, it stores ``rope_scaling`` as given (``null`` in config.json).
"""

from .configuration_lgtoy import LgToyConfig


class LgV4RopeConfig(LgToyConfig):
    model_type = "lgv4rope"

    def __init__(self, rope_theta: float = 10000.0, rope_scaling=None, **kwargs):
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        super().__init__(**kwargs)
