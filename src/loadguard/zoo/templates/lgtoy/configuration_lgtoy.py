"""Configuration of the loadguard toy causal LM (a loadguard zoo model; remote code)."""

from transformers import PretrainedConfig


class LgToyConfig(PretrainedConfig):
    """A tiny causal LM whose flags select how its non-persistent state is declared and rebuilt.

    Flags (each reproduces one way a transformers v5 load goes wrong; all off = failure mode a):
      rebuild_buffers_in_init: ``_init_weights`` recomputes every non-persistent buffer (the clean model).
      share_causal_mask: one causal-mask tensor is registered as a buffer in every layer (failure mode c).
      use_logit_scale: a bare ``nn.Parameter`` that ``_init_weights`` has no branch for (failure mode d).
      scaled_lm_head: the LM head is an ``nn.Linear`` subclass holding a non-persistent buffer.
      unguarded_init: ``_init_weights`` writes through ``.data`` instead of ``torch.nn.init`` (failure mode e).
      rotary_as_attribute: rotary frequencies kept as a plain tensor attribute, neither parameter nor buffer
        (as Qwen-1 keeps ``inv_freq``): transformers 5 leaves it on the meta device.
    """

    model_type = "lgtoy"

    def __init__(
        self,
        vocab_size: int = 64,
        hidden_size: int = 32,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 2,
        intermediate_size: int = 64,
        max_position_embeddings: int = 64,
        initializer_range: float = 0.02,
        rebuild_buffers_in_init: bool = False,
        share_causal_mask: bool = False,
        use_logit_scale: bool = False,
        scaled_lm_head: bool = False,
        unguarded_init: bool = False,
        rotary_as_attribute: bool = False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rebuild_buffers_in_init = rebuild_buffers_in_init
        self.share_causal_mask = share_causal_mask
        self.use_logit_scale = use_logit_scale
        self.scaled_lm_head = scaled_lm_head
        self.unguarded_init = unguarded_init
        self.rotary_as_attribute = rotary_as_attribute
        kwargs.setdefault("use_cache", False)
        kwargs.setdefault("tie_word_embeddings", False)  # untied on every transformers version
        super().__init__(**kwargs)
