"""Configuration of a toy LM whose constructor state depends on a branch of its config (a loadguard zoo model;
remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgCondConfig(LgToyConfig):
    model_type = "lgcond"

    def __init__(self, kv_cache_bits: int = 8, quantize_kv_cache: bool = True, **kwargs):  # see configuration_lgtoy
        self.kv_cache_bits = kv_cache_bits
        self.quantize_kv_cache = quantize_kv_cache
        super().__init__(**kwargs)
