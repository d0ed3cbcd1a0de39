"""Which workaround gives back each entry of the API diff (transformers 4.57, and names of 4.x releases before it,
-> the pinned 5.x), or why none does.

``tests/workarounds/test_api_diff.py`` requires every entry covered or declined; ``loadguard workarounds coverage`` prints the
tally. A new transformers release regenerates the diff (``make api-diff``): an entry nobody covers fails the test.
"""

from __future__ import annotations

import functools
import re

from .transformers_v4 import V4_GENERATION_DEFAULTS
from .v4_api import V4_MODEL_ATTRIBUTES, v4_config_defaults
from .v4_auto import V4_AUTO_CLASSES
from .v4_generate import HOOK
from .v4_names import diff, provider
from .v4_runtime import LEGACY_CACHE
from .v4_standins import VANISHED
from .v4_star import NATIVE

# (names matching the pattern, why v4-module-names gives no stand-in): the name entries no workaround serves
NAMES_DECLINED: tuple[tuple[str, str], ...] = (
    (
        r"^name:transformers\.models\.auto\.modeling_auto:_\w+$",
        "the auto classes' private lazy stand-ins: the public names are v4-removed-auto-classes'",
    ),
    (
        r"^name:transformers\.models\.[\w.]+:_[A-Z_]*EXPECTED_\w+$",
        "an expected output shape or loss quoted in a native model's docstrings: model code does not compute with it",
    ),
    (
        r"^name:transformers:(TF|Flax|FLAX_|TF_)\w*$",
        "a TensorFlow or Flax class: transformers 5 removed both backends; a PyTorch load never needs one",
    ),
    (
        r"^name:transformers:\w+_PRETRAINED_(CONFIG_ARCHIVE_MAP|MODEL_ARCHIVE_LIST)$",
        "the Hub URL lists 4.41 removed: a model's code that names one only defines its own",
    ),
    (
        r"^name:transformers:\w*OnnxConfig\w*$",
        "an ONNX export config (export moved to optimum): configuration files import them from transformers.onnx, "
        "which v4-onnx-module gives back",
    ),
    (
        r"^name:transformers:\w+$",
        "a top-level name whose 4.x home transformers 5 removed with its behaviour (agents and tools, data and dataset "
        "helpers, pipelines, deprecated models, slow-only tokenizers, legacy cache and beam-search classes): no "
        "stand-in can give it; code that imports it must be ported",
    ),
    (
        r"^name:transformers\.models\.[\w.]+:[A-Z]\w*$",
        "a layer class of a native model that 5.x restructured or removed: no stand-in can "
        "give 4.x's behaviour; remote code subclassing it must be ported",
    ),
    (
        r"^name:transformers\.models\.[\w.]+:_?[a-z]\w*$",
        "a helper function of a native model that 5.x removed with no public home: "
        "remote code that imports it must carry its own copy",
    ),
    (
        r"^name:transformers\.cache_utils:\w+$",
        "a cache class or helper of 4.x's cache API that 5.x removed or rebuilt (SinkCache, HybridCache, offloaded and "
        "quantized caches, cache processors): generate-time code that builds one must be ported",
    ),
    (
        r"^name:transformers\.generation:\w+$",
        "4.x's beam-search, constraint and per-strategy output classes, removed with generate's rewritten loop: code "
        "that subclasses or builds one must be ported",
    ),
    (
        r"^name:transformers\.tokenization_utils(_base|_fast)?:\w+$",
        "tokenizer internals of 4.x's slow/fast split, which 5.x merged: a tokenization file that imports one must be "
        "ported (a model's load imports its modeling files, not its tokenizer)",
    ),
    (
        r"^name:transformers\.(integrations|modeling_flash_attention_utils|modeling_rope_utils):\w+$",
        "quantization, GGUF, tensor-parallel, flash-attention and RoPE-validation internals 5.x rewrote: transformers' "
        "own loading calls them, model code does not (ROPE_INIT_FUNCTIONS['default'] is v4-rope-init-default's)",
    ),
    (
        r"^name:transformers\.(modeling_utils|configuration_utils|generation\.utils|integrations\.[\w.]+|utils[\w.]*):_\w+$",
        "transformers' private loading / import machinery: remote code does not import it (a load that does says which name)",
    ),
    (
        r"^name:transformers\.(modeling_utils|configuration_utils|generation\.utils|utils[\w.]*|file_utils|pytorch_utils):[\w]+$",
        "a helper 5.x removed with its home and no 4.x meaning for model code to rely on (download/URL, TF/Flax, "
        "model-parallel and tensor-parallel internals)",
    ),
)

# (entry ids matching the pattern, why no workaround gives it back): the non-name entries
DECLINED: tuple[tuple[str, str], ...] = (
    (r"^config:_commit_hash$", "Hub bookkeeping transformers set while loading: model code does not read it"),
    (
        r"^config:_attn_implementation_autoset$",
        "bookkeeping of 4.48-4.50's attention selection while loading: model code reads _attn_implementation",
    ),
    (
        r"^module:transformers\.deepspeed$",
        "moved to transformers.integrations.deepspeed in 4.x and removed in 5.x: a training helper, not used while "
        "loading or running a model",
    ),
    (
        r"^module:transformers\.(models\.[\w.]+\.(modeling_(tf|flax)_\w+|modeling_flax_auto|tokenization_bert_tf)|"
        r"modeling_tf_pytorch_utils|training_args_tf|utils\.dummy_(tf|flax|keras_nlp|tensorflow_text)_objects)$",
        "a TensorFlow or Flax module: transformers 5 removed both backends; a PyTorch load never imports one",
    ),
    (
        r"^module:transformers\.models\.[\w.]+\.tokenization_\w+_fast$",
        "a fast tokenizer's module: 5.x keeps one tokenization module per model, and the class under its 4.x name at "
        "the top level (from transformers import LlamaTokenizerFast works on 4.x and 5.x): a tokenizer file that "
        "imports the _fast module must import from transformers (a model's load imports its modeling files)",
    ),
    (
        r"^module:transformers\.models\.[\w.]+\.feature_extraction_\w+$",
        "an image feature extractor's module (4.x's name for an image processor): v4-module-names gives the top-level "
        "name back (from transformers import CLIPFeatureExtractor); an import from the module must use that",
    ),
    (
        r"^module:transformers\.onnx\.\w+$",
        "a submodule of transformers.onnx: v4-onnx-module gives the package's names back (from transformers.onnx "
        "import OnnxConfig, what configuration files import); only an export imports the submodules",
    ),
    (
        r"^module:transformers\.utils\.dummy_\w+_objects$",
        "placeholders 4.x raised an ImportError with when a backend (sentencepiece, timm) was missing: never a working "
        "object to give back",
    ),
    (
        r"^module:transformers\.(agents|tools|benchmark|benchmark\.\w+|commands|convert_\w+|data\.datasets|sagemaker|"
        r"utils\.metrics)$",
        "transformers' tooling around models (agents and tools, benchmarks, CLI commands, conversion scripts, dataset "
        "helpers, SageMaker, usage metrics): loading or running a model never imports it",
    ),
    (
        r"^module:transformers\.(generation_utils|generation\.beam_constraints|generation\.beam_search)$",
        "4.x's generate loop (generation_utils moved to transformers.generation in 4.26, then kept as a shim until "
        "4.36; the beam scorers and constraints went with 5.x's rewritten loop): code that imports it must be "
        "ported (GenerationMixin: from transformers import GenerationMixin)",
    ),
    (
        r"^module:transformers\.models\.[\w.]+$",
        "a module of a native model transformers deprecated, then removed, or renamed (archive maps, custom-kernel "
        "loaders): remote code that imports it must carry its own copy",
    ),
    (
        r"^model:GenerationMixin\.",
        "generate's internals (cache preparation, prefill chunking): 5.x's generate loop never calls "
        "them, so code overriding them targets 4.x's loop and must be ported",
    ),
    (
        r"^model:PreTrainedModel\.(_create_repo|_fix_state_dict_\w+|_get_key_renaming_mapping|_get_no_split_modules|_load_from_flax|_load_from_tf|"
        r"_move_missing_keys_from_meta_to_cpu|_set_default_dtype|_tie_encoder_decoder_weights|_flash_attn_[23]_can_dispatch|"
        r"_autoset_attn_implementation|_check_and_enable_\w+|_is_quantized_training_enabled|_load_pretrained_model_low_mem|"
        r"_set_default_torch_dtype)$",
        "loading machinery of 4.x that 5.x replaced: 5.x never calls it, so an override is dead code, and nothing calls it from model code",
    ),
    (
        r"^model:PreTrainedModel\.(add_memory_hooks|reset_memory_hooks_state|_hook_rss_memory_\w+|to_bettertransformer|reverse_bettertransformer)$",
        "profiling and BetterTransformer helpers called by users, not by model code: a user's script gets AttributeError and the name",
    ),
    (
        r"^model:PreTrainedModel\.active_adapter$",
        "PEFT's accessor called by users (5.x: active_adapters), never during a load",
    ),
    (
        r"^model:PreTrainedModel\.(kernelize|tie_embeddings_and_encoder_decoder|prune_heads)$",
        "replaced in 5.x by set_use_kernels / tie_weights / the model's own _prune_heads: called by users, never during a load",
    ),
    (
        r"^signature:\w+\._\w+$",
        "private machinery whose parameters 5.x changed: model code overriding it targets 4.x's internals",
    ),
    (
        r"^signature:PreTrainedModel\.(from_pretrained|save_pretrained|push_to_hub|add_adapter|delete_adapter|set_adapter|load_adapter|"
        r"get_adapter_state_dict|add_model_tags|dequantize|get_compiled_call|get_init_context|get_correct_attn_implementation|"
        r"set_attn_implementation|gradient_checkpointing_enable|num_parameters|resize_token_embeddings)$",
        "public API users call (keywords 5.x kept work as before); remote code does not override these",
    ),
    (
        r"^signature:GenerationMixin\.(generate|generate_batch|init_continuous_batching|load_custom_generate|compute_transition_scores)$",
        "generation entry points users call; an override of generate that calls super().generate with 4.x keywords keeps working",
    ),
    (
        r"^model:(Dynamic)?Cache\.(key_cache|value_cache)$",
        "4.4x-4.56's per-layer tensor lists, replaced by cache.layers[i].keys / .values: code that reads or writes them "
        "must be ported (a read-only stand-in would drop its writes without a word)",
    ),
    (
        r"^model:(Dynamic)?Cache\.seen_tokens$",
        "the token count 4.36-4.46 kept and deprecated: get_seq_length() gives it on 4.x and 5.x alike",
    ),
    (
        r"^model:(Dynamic)?Cache\.(max_batch_size|max_cache_len|get_max_cache_shape)$",
        "a static cache's sizing, which 5.x keeps per layer: generate-time code that sizes a cache by it must be ported",
    ),
    (
        r"^model:(Dynamic)?Cache\.(append_new_layers|batch_split|from_batch_splits)$",
        "what transformers' own update and contrastive search (removed in 5.x) called: model code does not",
    ),
    (
        r"^signature:(Dynamic)?Cache\.update$",
        "5.x takes *args/**kwargs after layer_idx: a call with 4.x's cache_kwargs (by position or keyword) is accepted",
    ),
    (
        r"^signature:(Dynamic)?Cache\.(early_initialization|get_mask_sizes)$",
        "called by transformers' own generate and masking, never by model code",
    ),
    (
        r"^signature:(Dynamic)?Cache\.crop$",
        "crop(max_length) kept the first max_length tokens in 4.x; 5.x's crop(tokens_to_remove) removes that many: "
        "the same call means another thing, which no stand-in can tell apart; code that crops must be ported",
    ),
    (
        r"^signature:GenerationMixin\.prepare_inputs_for_generation$",
        "5.x calls it with keyword arguments only: a 4.x override taking **kwargs keeps working, one that does not says which keyword",
    ),
)


@functools.cache
def _entries() -> dict[str, dict]:
    return {entry["id"]: entry for entry in diff()["entries"]}


def coverage(entry_id: str) -> tuple[str, str]:
    """``("covered", workaround)``, ``("declined", reason)`` or ``("uncovered", "")`` for a diff entry."""
    kind, _, rest = entry_id.partition(":")
    if kind == "model" and rest.split(".", 1)[1] == HOOK:
        return "covered", "v4-generate-hooks"
    if (
        kind == "model"
        and rest.split(".", 1)[0] in ("Cache", "DynamicCache")
        and rest.split(".", 1)[1] in LEGACY_CACHE
    ):
        return "covered", "v4-legacy-cache"
    if _entries().get(entry_id, {}).get("via") == "GenerationMixin":
        return "declined", (
            "a GenerationMixin method PreTrainedModel inherited until 4.50: a model class that lists only "
            "PreTrainedModel among its bases has had no generate machinery since 4.50; it must add GenerationMixin"
        )
    if entry_id == "module:transformers.onnx":
        return "covered", "v4-onnx-module"
    if kind == "module" and rest in VANISHED:
        return "covered", "v4-module-names"
    if kind == "star" and NATIVE.match(rest):
        return "covered", "v4-star-imports"
    if kind == "config":
        if rest in V4_GENERATION_DEFAULTS:
            return "covered", "v4-config-generation-defaults"
        if rest in v4_config_defaults():
            return "covered", "v4-config-defaults"
    elif kind == "model" and rest.split(".", 1)[1] in V4_MODEL_ATTRIBUTES:
        return "covered", "v4-model-attributes"
    elif entry_id == "signature:PreTrainedModel.tie_weights":
        return "covered", "v4-tie-weights-signature"
    elif kind == "auto" and rest in V4_AUTO_CLASSES:
        return "covered", "v4-removed-auto-classes"
    elif kind == "name":
        module, _, name = rest.partition(":")
        if name == "is_torch_fx_available":
            return "covered", "v4-torch-fx-available"
        if name in V4_AUTO_CLASSES:
            return "covered", "v4-removed-auto-classes"
        if module == "transformers.models.llama.modeling_llama" and name in (
            "LlamaFlashAttention2",
            "LlamaSdpaAttention",
        ):
            return "covered", "v4-llama-attention-classes"
        origin = _entries().get(entry_id, {}).get("origin")
        if provider(module, name, origin) is not None:
            return "covered", "v4-module-names"
        reason = next((why for pattern, why in NAMES_DECLINED if re.match(pattern, entry_id)), None)
        return ("declined", reason) if reason else ("uncovered", "")
    reason = next((why for pattern, why in DECLINED if re.match(pattern, entry_id)), None)
    return ("declined", reason) if reason else ("uncovered", "")


def tally() -> dict[str, object]:
    """Every entry's coverage, counted: ``{"covered": {workaround: n}, "declined": n, "uncovered": [ids]}``."""
    covered: dict[str, int] = {}
    declined = 0
    uncovered = []
    for entry in diff()["entries"]:
        state, what = coverage(entry["id"])
        if state == "covered":
            covered[what] = covered.get(what, 0) + 1
        elif state == "declined":
            declined += 1
        else:
            uncovered.append(entry["id"])
    return {
        "from": diff()["from"],
        "to": diff()["to"],
        "entries": len(diff()["entries"]),
        "covered": covered,
        "declined": declined,
        "uncovered": uncovered,
    }


__all__ = ["DECLINED", "NAMES_DECLINED", "coverage", "tally"]
