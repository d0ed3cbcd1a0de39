"""Configuration of a toy LM with a YaRN-scaled rotary table (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgYarnConfig(LgToyConfig):
    model_type = "lgyarn"

    def __init__(
        self,
        rope_theta: float = 10000.0,
        rope_factor: float = 4.0,
        original_max_position_embeddings: int = 16,
        **kwargs,
    ):  # its own __init__: see configuration_lgtoy
        self.rope_theta = rope_theta
        self.rope_factor = rope_factor
        self.original_max_position_embeddings = original_max_position_embeddings
        super().__init__(**kwargs)
