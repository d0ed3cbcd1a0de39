"""Configuration of the toy encoder-decoder written for transformers 4.x (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgV4S2SConfig(LgToyConfig):
    model_type = "lgv4s2s"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        kwargs.setdefault("tie_word_embeddings", False)  # the LM head is its own; the embedding tables are shared
        super().__init__(**kwargs)
