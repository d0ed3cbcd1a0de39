"""Configuration of the MiniCPM-V-2.6-shaped loadguard zoo model (remote code).

Like MiniCPM-V 2.6's, it extends the language model's config (here Llama's) with the vision tower, the
resampler and the image-slicing settings.
"""

from transformers import LlamaConfig


class LgMiniCPMVConfig(LlamaConfig):
    """A tiny vision-language model shaped like MiniCPM-V 2.6.

    ``fixed=True`` makes ``_init_weights`` rebuild the resampler's ``pos_embed`` (the fix upstream asked
    model authors to write); ``fixed=False`` is the model as it shipped, whose ``pos_embed`` is left as
    whatever memory transformers v5 handed it.
    """

    model_type = "lgminicpmv"

    def __init__(
        self,
        vision_hidden_size: int = 32,
        vision_num_heads: int = 2,
        patch_size: int = 4,
        query_num: int = 8,
        scale_resolution: int = 32,
        max_slice_nums: int = 4,
        resampler_max_size=(70, 70),
        fixed: bool = False,
        **kwargs,
    ):
        self.vision_hidden_size = vision_hidden_size
        self.vision_num_heads = vision_num_heads
        self.patch_size = patch_size
        self.query_num = query_num
        self.scale_resolution = scale_resolution
        self.max_slice_nums = max_slice_nums
        self.resampler_max_size = list(resampler_max_size)
        self.fixed = fixed
        for key, value in dict(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,  # untied on every transformers version
        ).items():
            kwargs.setdefault(key, value)
        super().__init__(**kwargs)
