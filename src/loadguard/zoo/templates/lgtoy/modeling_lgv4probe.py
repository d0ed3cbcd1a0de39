"""A toy wrapper model that asks its language model which attention kernels it supports (a loadguard zoo model;
remote code), as LLaVA-style remote code (TinyLLaVA, Prismatic, Florence-2) does:

    @property
    def _supports_sdpa(self):
        return self.language_model._supports_sdpa

transformers 4 read ``cls._supports_sdpa`` on the class before constructing the model (the property object: truthy).
transformers 5 reads it on the instance inside ``PreTrainedModel.__init__``, before ``language_model`` exists:
``AttributeError: 'LgV4ProbeForCausalLM' object has no attribute 'language_model'``. Once constructed, its buffers
are not rebuilt (failure mode a).
"""

from torch import nn

from .configuration_lgv4probe import LgV4ProbeConfig
from .modeling_lgtoy import LgToyForCausalLM, LgToyPreTrainedModel


class LgV4ProbeLanguageModel(LgToyForCausalLM):
    """The wrapped language model: it supports SDPA (its attention does not care which kernel is named)."""

    config_class = LgV4ProbeConfig
    _supports_sdpa = True


class LgV4ProbeForCausalLM(LgToyPreTrainedModel):
    config_class = LgV4ProbeConfig
    _no_split_modules = ["LgToyBlock"]

    def __init__(self, config):
        super().__init__(config)
        self.language_model = LgV4ProbeLanguageModel(config)
        self.post_init()

    @property
    def _supports_sdpa(self):
        return self.language_model._supports_sdpa

    @property
    def _supports_flash_attn_2(self):
        return self.language_model._supports_flash_attn_2

    def get_input_embeddings(self):
        return self.language_model.embed_tokens

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return self.language_model(input_ids, attention_mask=attention_mask)

    def generate(self, *args, **kwargs):
        return self.language_model.generate(*args, **kwargs)
