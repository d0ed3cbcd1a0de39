"""Configuration of a toy LM written for transformers 4.41 in ChatGLM's way (a loadguard zoo model; remote code): its
layer count is ``num_layers``; nothing names ``num_hidden_layers``."""

from .configuration_lgtoy import LgToyConfig


class LgV4HooksConfig(LgToyConfig):
    model_type = "lgv4hooks"

    def __init__(self, num_layers: int = 2, use_cache: bool = True, **kwargs):
        kwargs.pop("num_hidden_layers", None)
        super().__init__(num_hidden_layers=num_layers, use_cache=use_cache, **kwargs)
        self.num_layers = num_layers
        del self.num_hidden_layers  # ChatGLM's config never had it
