"""The toy causal LM with a generation config of its own, as diffusion-LM remote code has (a loadguard zoo model;
remote code): a ``GenerationConfig`` subclass whose ``validate(self)`` takes no keyword arguments, built in the model's
``__init__``. transformers 5 constructs every generation config calling ``validate(user_set_attributes=...)``, so
constructing the model raises ``TypeError``.
"""

from transformers import GenerationConfig

from .configuration_lgv4validate import LgV4ValidateConfig
from .modeling_lgtoy import LgToyForCausalLM


class LgV4DiffusionGenerationConfig(GenerationConfig):
    def __init__(self, **kwargs):
        self.diffusion_steps = kwargs.pop("diffusion_steps", 8)
        super().__init__(**kwargs)

    def validate(self):
        if self.diffusion_steps < 1:
            raise ValueError("diffusion_steps must be at least 1")


class LgV4ValidateForCausalLM(LgToyForCausalLM):
    config_class = LgV4ValidateConfig

    def __init__(self, config):
        super().__init__(config)
        self.diffusion_config = LgV4DiffusionGenerationConfig(diffusion_steps=4)
