"""Configuration of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code)."""

from transformers import PretrainedConfig


class LgMiniCPMVConfig(PretrainedConfig):
    """A tiny vision-language model shaped like MiniCPM-V 2.6.

    ``fixed=True`` makes ``_init_weights`` rebuild the resampler's ``pos_embed`` (the fix upstream asked
    model authors to write); ``fixed=False`` is the model as it shipped, whose ``pos_embed`` is left as
    whatever memory transformers v5 handed it.
    """

    model_type = "lgminicpmv"

    def __init__(
        self,
        vocab_size: int = 64,
        hidden_size: int = 32,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 2,
        intermediate_size: int = 64,
        max_position_embeddings: int = 128,
        vision_hidden_size: int = 32,
        patch_size: int = 4,
        query_num: int = 8,
        resampler_max_size=(70, 70),
        slot_token_id: int = 8,
        image_scale: float = 8.0,
        initializer_range: float = 0.02,
        fixed: bool = False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.vision_hidden_size = vision_hidden_size
        self.patch_size = patch_size
        self.query_num = query_num
        self.resampler_max_size = list(resampler_max_size)
        self.slot_token_id = slot_token_id
        self.image_scale = image_scale
        self.initializer_range = initializer_range
        self.fixed = fixed
        kwargs.setdefault("use_cache", False)
        kwargs.setdefault("tie_word_embeddings", False)  # untied on every transformers version
        super().__init__(**kwargs)
