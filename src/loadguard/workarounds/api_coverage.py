"""Which workaround gives back each entry of the API diff (transformers 4.57 -> the pinned 5.x), or why none does.

``tests/workarounds/test_api_diff.py`` requires every entry covered or declined; ``loadguard workarounds coverage`` prints the
tally. A new transformers release regenerates the diff (``make api-diff``): an entry nobody covers fails the test.
"""

from __future__ import annotations

import re

from .transformers_v4 import V4_GENERATION_DEFAULTS
from .v4_api import V4_MODEL_ATTRIBUTES, v4_config_defaults
from .v4_auto import V4_AUTO_CLASSES
from .v4_names import declined as declined_name
from .v4_names import diff, provider

# (entry ids matching the pattern, why no workaround gives it back): the non-name entries
DECLINED: tuple[tuple[str, str], ...] = (
    (r"^config:_commit_hash$", "Hub bookkeeping transformers set while loading: model code does not read it"),
    (
        r"^model:GenerationMixin\.",
        "generate's internals (cache preparation, prefill chunking): 5.x's generate loop never calls "
        "them, so code overriding them targets 4.x's loop and must be ported",
    ),
    (
        r"^model:PreTrainedModel\.(_create_repo|_fix_state_dict_\w+|_get_key_renaming_mapping|_get_no_split_modules|_load_from_flax|_load_from_tf|"
        r"_move_missing_keys_from_meta_to_cpu|_set_default_dtype|_tie_encoder_decoder_weights|_flash_attn_[23]_can_dispatch)$",
        "loading machinery of 4.x that 5.x replaced: 5.x never calls it, so an override is dead code, and nothing calls it from model code",
    ),
    (
        r"^model:PreTrainedModel\.(add_memory_hooks|reset_memory_hooks_state|_hook_rss_memory_\w+|to_bettertransformer|reverse_bettertransformer)$",
        "profiling and BetterTransformer helpers called by users, not by model code: a user's script gets AttributeError and the name",
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
        r"^signature:GenerationMixin\.prepare_inputs_for_generation$",
        "5.x calls it with keyword arguments only: a 4.x override taking **kwargs keeps working, one that does not says which keyword",
    ),
)


def coverage(entry_id: str) -> tuple[str, str]:
    """``("covered", workaround)``, ``("declined", reason)`` or ``("uncovered", "")`` for a diff entry."""
    kind, _, rest = entry_id.partition(":")
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
        origin = next((e.get("origin") for e in diff()["entries"] if e["id"] == entry_id), None)
        if provider(module, name, origin) is not None:
            return "covered", "v4-module-names"
        reason = declined_name(entry_id)
        if reason:
            return "declined", reason
        return "uncovered", ""
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


__all__ = ["DECLINED", "coverage", "tally"]
