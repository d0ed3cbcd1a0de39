"""What transformers 5 changed, in the words of its own release notes and API: the sentences a pull request for a
model's repository uses to say why each part of the change is there (never the name of a loadguard workaround, which
means nothing to the model's maintainer)."""

from __future__ import annotations

BUFFERS = (
    "Since v5.0, `from_pretrained` builds the model on the `meta` device and then allocates every non-persistent buffer "
    "(`register_buffer(..., persistent=False)`) and every weight missing from the checkpoint with `torch.empty_like`; only "
    "what the model's `_init_weights` re-initializes gets a value (huggingface/transformers#48892: the fix belongs in each "
    "model's `_init_weights`, as transformers' own models now do)."
)

CHANGED: dict[str, str] = {
    "remote-code-typing-aliases": "Recent PyTorch no longer leaks `typing` names (`List`, `Optional`, ...) through "
    "`from torch.nn.functional import *`: code that relied on it raises `NameError` when it is imported.",
    "v4-attn-mask-utils": "`transformers.modeling_attn_mask_utils` (`_prepare_4d_attention_mask`, "
    "`_prepare_4d_causal_attention_mask`, `AttentionMaskConverter`) was removed in v5.0 (5.25 brings it back, deprecated).",
    "v4-torch-fx-available": "`transformers.utils.is_torch_fx_available` was removed in v5.",
    "v4-tied-weights-keys": "`_tied_weights_keys` is a mapping `{tied key: source key}` in v5 (a list in v4), and "
    "`PreTrainedModel.__init__` subclasses must call `self.post_init()`, which sets `all_tied_weights_keys`.",
    "v4-rope-scaling": "v5 configs turn `rope_scaling: null` into `{'rope_type': 'default', 'rope_theta': ...}`: code "
    "that tests `rope_scaling is None` or reads `rope_scaling['type']` takes another branch.",
    "v4-llama-attention-classes": "`LlamaFlashAttention2` and `LlamaSdpaAttention` were merged into `LlamaAttention`, "
    "which picks its kernel from `config._attn_implementation`.",
    "v4-config-generation-defaults": "Configs no longer carry generation defaults (`max_length`, `num_beams`, "
    "`top_k`, ...): they live in `GenerationConfig`.",
    "v4-config-defaults": "`PretrainedConfig` no longer sets attributes every v4 config had (`pad_token_id`, "
    "`bos_token_id`, `eos_token_id`, `is_decoder`, `tie_word_embeddings`, ...) unless the config class sets them.",
    "v4-config-use-cache": "`use_cache` is no longer kept on a config class that does not declare it.",
    "v4-tie-weights-signature": "`PreTrainedModel.tie_weights` is called with keyword arguments (`missing_keys`, "
    "`recompute_mapping`) while loading.",
    "v4-model-attributes": "`PreTrainedModel` no longer has `get_head_mask`, `get_extended_attention_mask`, "
    "`invert_attention_mask`, `_tie_or_clone_weights` and other v4 helpers.",
    "v4-legacy-cache": "`DynamicCache.from_legacy_cache`, `to_legacy_cache` and `get_usable_length` were removed: "
    "generation passes `Cache` objects.",
    "v4-generate-hooks": "`GenerationMixin._extract_past_from_model_output` was removed (v4.47).",
    "v4-cache-layer-count": "`generate` builds its default cache one layer per `config.num_hidden_layers`.",
    "v4-generate-attention-mask": "`generate` no longer passes an all-ones `attention_mask` to "
    "`prepare_inputs_for_generation` and `_update_model_kwargs_for_generation` (it passes `None`).",
    "v4-module-names": "Names v4 modules exported were removed or moved (the v5 migration guide lists them).",
    "v4-removed-auto-classes": "`AutoModelForVision2Seq` and `AutoModelWithLMHead` were removed "
    "(`AutoModelForImageTextToText`, `AutoModelForCausalLM`).",
    "v4-generation-validate": "`GenerationConfig.validate` is called with keyword arguments (`user_set_attributes`).",
    "v4-attention-probe": "`PreTrainedModel.__init__` asks the instance for `_supports_sdpa` / `_supports_flash_attn_2` "
    "before the subclass's `__init__` has built its sub-modules.",
    "v4-rope-init-default": "`ROPE_INIT_FUNCTIONS` no longer has a `'default'` entry (plain RoPE is computed directly).",
    "v4-onnx-module": "`transformers.onnx` was removed (ONNX export moved to `optimum`).",
    "remote-code-lazy-imports": "`check_imports` fails on a package the code imports only inside a function when that "
    "package does not import on v5.",
    "v4-nested-from-pretrained": "A model is constructed under the `meta` device, where a nested `from_pretrained` in "
    "`__init__` is refused.",
}


def changed(workaround: str, fallback: str) -> str:
    """What transformers changed that a workaround stood in for, in transformers' words (``fallback``: the change's own
    description, for one registered outside loadguard)."""
    return CHANGED.get(workaround, fallback)


__all__ = ["BUFFERS", "CHANGED", "changed"]
