"""Configuration of a toy LM whose attention keeps its scale as a plain tensor attribute (a loadguard zoo model;
remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgCodegenConfig(LgToyConfig):
    model_type = "lgcodegen"

    def __init__(self, **kwargs):  # its own __init__: see configuration_lgtoy
        super().__init__(**kwargs)
