"""Configuration of a toy head around an encoder-decoder (a loadguard zoo model; remote code).

Like T5's configuration: whatever ``tie_word_embeddings`` a saved config.json holds, constructing the config ties
(older checkpoints relied on it). A model built with the setting switched off afterwards (as transformers' own tests
do) saves untied embedding tables; loading it declares the tie again.
"""

from .configuration_lgtoy import LgToyConfig


class LgS2SHeadConfig(LgToyConfig):
    model_type = "lgs2shead"

    def __init__(self, **kwargs):  # its own __init__: transformers 5 would make the class a dataclass without the toy's fields
        kwargs.pop("tie_word_embeddings", None)
        super().__init__(**kwargs)
        self.tie_word_embeddings = True
