"""Configuration of a toy LM written for transformers 4.x that loads a sub-model in its constructor (a loadguard zoo
model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4NestedConfig(LgToyConfig):
    model_type = "lgv4nested"

    def __init__(self, trunk_path: str = "", **kwargs):  # its own __init__: see configuration_lgtoy
        self.trunk_path = trunk_path
        super().__init__(**kwargs)
