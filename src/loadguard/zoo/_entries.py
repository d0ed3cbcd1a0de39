"""The zoo's entries: what each one is, how it is built and what a broken load does to it."""

from __future__ import annotations

from ..errors import UnknownZooEntryError
from ..report import Status
from ._entries_running import RUNS_INTO
from ._entry import TOY_NP, ExpectedFinding, ZooEntry

_VLM_PROMPTS = (
    "(<image>./</image>) describe what you see .",
    "(<image>./</image>) (<image>./</image>) what do you see ?",
)
# MiniCPM-V 2.6's remote code fails on transformers 5 in this order, each fixed by the next workaround
_MINICPMV_FAILURES = (
    ("v4-attn-mask-utils", "ModuleNotFoundError: No module named 'transformers.modeling_attn_mask_utils'"),
    ("remote-code-typing-aliases", "NameError: name 'List' is not defined"),
    ("v4-tied-weights-keys", "AttributeError: 'LgMiniCPMV' object has no attribute 'all_tied_weights_keys'"),
)


def _yarn(suffix: str, how: str, dtype: str | None) -> ZooEntry:
    """A DeepSeek-V2/V3-style YaRN rotary embedding, built, saved and loaded in ``dtype``."""
    return ZooEntry(
        f"yarn_rotary{suffix}",
        "lgyarn",
        "(a) a YaRN-scaled rotary embedding (DeepSeek-V2/V3-style remote code) whose cos/sin tables a helper makes in "
        f"torch.get_default_dtype(), {how}: transformers 5 leaves inv_freq and the tables uninitialized, and a "
        "recompute after loading runs where the default dtype is float32 again",
        failure_mode="a",
        expected=TOY_NP
        + tuple(
            ExpectedFinding(f"rotary.{name}", Status.UNINITIALIZED)
            for name in ("cos_cached", "inv_freq", "sin_cached")
        ),
        dtype=dtype,
    )


_YARN_DTYPES = (
    ("", "saved in float32", None),
    ("_bf16", "saved and loaded in bfloat16", "bfloat16"),
    ("_fp16", "saved and loaded in float16", "float16"),
)


ENTRIES: dict[str, ZooEntry] = {
    e.name: e
    for e in [
        ZooEntry(
            "minicpmv_like",
            "lgminicpmv",
            "MiniCPM-V-2.6-shaped VLM, code written for transformers 4 (imports modeling_attn_mask_utils, uses "
            "List unimported, no post_init): the resampler's 2D sin/cos pos_embed is a non-persistent buffer "
            "that _init_weights does not rebuild",
            failure_mode="a",
            expected=(ExpectedFinding("resampler.pos_embed", Status.UNINITIALIZED),),
            prompts=_VLM_PROMPTS,
            image_sizes=((48, 32), (32, 32), (24, 40)),
            failures=_MINICPMV_FAILURES,
        ),
        ZooEntry(
            "minicpmv_like_fixed",
            "lgminicpmv",
            "minicpmv_like with the fix: _init_weights rebuilds the resampler's pos_embed",
            config={"fixed": True},
            prompts=_VLM_PROMPTS,
            image_sizes=((48, 32), (32, 32), (24, 40)),
            failures=_MINICPMV_FAILURES,
        ),
        ZooEntry(
            "np_buffer",
            "lgtoy",
            "(a) non-persistent buffers (sin/cos table, index table, bool causal masks) computed in "
            "__init__ with no _init_weights branch",
            failure_mode="a",
            expected=TOY_NP,
        ),
        ZooEntry(
            "np_buffer_in_checkpoint",
            "lgtoy",
            "(b) like np_buffer, but the checkpoint carries the buffers' values: transformers discards "
            "them as unexpected keys",
            failure_mode="b",
            expected=TOY_NP,
            save_non_persistent_buffers=True,
        ),
        ZooEntry(
            "shared_buffer",
            "lgtoy",
            "(c) one causal-mask tensor registered as a non-persistent buffer in every layer: the first "
            "alias comes out garbage, the others stay on meta",
            failure_mode="c",
            config={"share_causal_mask": True},
            expected=(
                ExpectedFinding("positions.table", Status.UNINITIALIZED),
                ExpectedFinding("positions.index", Status.UNINITIALIZED),
                ExpectedFinding("layers.0.attn.causal_mask", Status.UNINITIALIZED),
                ExpectedFinding("layers.{later_layer}.attn.causal_mask", Status.ON_META),
            ),
            fix="not fixable: one mask tensor is made by the model and passed to every layer's constructor; recomputed in the layer it reads that argument, left on meta by transformers 5 (both proofs fail): make the mask in the layer, by hand",
        ),
        ZooEntry(
            "missing_key",
            "lgtoy",
            "(d) a bare nn.Parameter (logit_scale) missing from the checkpoint, with no _init_weights "
            "branch to initialize it",
            failure_mode="d",
            config={"use_logit_scale": True, "rebuild_buffers_in_init": True},
            expected=(ExpectedFinding("logit_scale", Status.UNINITIALIZED),),
            drop_keys=("logit_scale",),
        ),
        ZooEntry(
            Status.OVERWRITTEN,
            "lgtoy",
            "(e) the LM head holds a non-persistent buffer, so it fails transformers' 'already loaded' "
            "backstop and an unguarded _init_weights overwrites its loaded weight",
            failure_mode="e",
            config={"scaled_lm_head": True, "unguarded_init": True, "rebuild_buffers_in_init": True},
            expected=(ExpectedFinding("lm_head.weight", Status.OVERWRITTEN),),
        ),
        ZooEntry(
            "sharded",
            "lgtoy",
            "(e) the overwritten model saved as a 3-shard checkpoint with a safetensors index",
            failure_mode="e",
            config={"scaled_lm_head": True, "unguarded_init": True, "rebuild_buffers_in_init": True},
            expected=(ExpectedFinding("lm_head.weight", Status.OVERWRITTEN),),
            shards=3,
        ),
        ZooEntry(
            "tensor_attribute",
            "lgtoy",
            "(a) rotary frequencies kept as a plain tensor attribute (as Qwen-1's inv_freq), neither parameter nor "
            "buffer: constructed on meta by from_pretrained and never given a value",
            failure_mode="a",
            config={"rotary_as_attribute": True, "rebuild_buffers_in_init": True},
            expected=(ExpectedFinding("positions.inv_freq", Status.ON_META),),
        ),
        ZooEntry(
            "typing_alias",
            "lgtyping",
            "(a) remote code that relies on typing.List leaking from `from torch.nn.functional import *`: "
            "fails to import on current torch; once imported, its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(("remote-code-typing-aliases", "NameError: name 'List' is not defined"),),
        ),
        ZooEntry(
            "v4_tied_weights",
            "lgv4",
            "(a) remote code written for transformers 4.x: _tied_weights_keys as a list and no post_init() call "
            "(v5: no attribute 'all_tied_weights_keys'); once loaded, its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-tied-weights-keys",
                    "AttributeError: 'LgV4ForCausalLM' object has no attribute 'all_tied_weights_keys'",
                ),
            ),
        ),
        ZooEntry(
            "v4_attn_mask",
            "lgv4mask",
            "(a) remote code that imports _prepare_4d_causal_attention_mask from transformers.modeling_attn_mask_utils "
            "(removed in v5); once imported, its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                ("v4-attn-mask-utils", "ModuleNotFoundError: No module named 'transformers.modeling_attn_mask_utils'"),
            ),
        ),
        ZooEntry(
            "v4_torch_fx",
            "lgv4fx",
            "(a) remote code that imports is_torch_fx_available from transformers.utils (removed in v5); once "
            "imported, its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-torch-fx-available",
                    "ImportError: cannot import name 'is_torch_fx_available' from 'transformers.utils'",
                ),
            ),
        ),
        ZooEntry(
            "v4_rope_scaling",
            "lgv4rope",
            "(a) remote code that reads config.rope_scaling['type'] with rope_scaling: null in its config "
            "(v5: KeyError 'type'); its rotary inv_freq and other buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP + (ExpectedFinding("rotary.inv_freq", Status.UNINITIALIZED),),
            failures=(("v4-rope-scaling", "KeyError: 'type'"),),
            config_json={"rope_scaling": None, "rope_theta": 10000.0},
            config_json_drop=("rope_parameters",),
        ),
        ZooEntry(
            "v4_llama_flash",
            "lgv4flash",
            "(a) remote code that imports LlamaFlashAttention2 from transformers' Llama module (gone); once "
            "imported, its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-llama-attention-classes",
                    "ImportError: cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama.modeling_llama'",
                ),
            ),
        ),
        ZooEntry(
            "v4_max_length",
            "lgv4gen",
            "(a) remote code that reads config.max_length, a generation default v5 configs no longer carry; its "
            "buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-config-generation-defaults",
                    "AttributeError: 'LgV4GenConfig' object has no attribute 'max_length'",
                ),
            ),
        ),
        ZooEntry(
            "v4_pad_token",
            "lgv4pad",
            "(a) remote code that reads config.pad_token_id, which every 4.x config carried and 5.x configs do not; its "
            "buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                ("v4-config-defaults", "AttributeError: 'LgV4PadConfig' object has no attribute 'pad_token_id'"),
            ),
        ),
        ZooEntry(
            "v4_tie_signature",
            "lgv4tie",
            "(a) remote code that overrides tie_weights(self), which transformers 5 calls with missing_keys= while "
            "loading; its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-tie-weights-signature",
                    "TypeError: LgV4TieForCausalLM.tie_weights() got an unexpected keyword argument 'recompute_mapping'",
                ),
            ),
        ),
        ZooEntry(
            "v4_generation_validate",
            "lgv4validate",
            "(a) remote code whose GenerationConfig subclass overrides validate(self) (diffusion-LM generate code), built in "
            "the model's __init__: transformers 5 calls validate(user_set_attributes=...) (TypeError); its buffers are not "
            "rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-generation-validate",
                    "TypeError: LgV4DiffusionGenerationConfig.validate() got an unexpected keyword argument 'user_set_attributes'",
                ),
            ),
        ),
        ZooEntry(
            "v4_model_attrs",
            "lgv4attrs",
            "(a) remote code that calls self.get_head_mask, a method 4.x models had and 5.x removed; its buffers are not "
            "rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-model-attributes",
                    "AttributeError: 'LgV4AttrsForCausalLM' object has no attribute 'get_head_mask'",
                ),
            ),
        ),
        *RUNS_INTO,
        ZooEntry(
            "v4_module_names",
            "lgv4names",
            "(a) remote code that imports find_pruneable_heads_and_indices and prune_linear_layer from "
            "transformers.pytorch_utils (removed in 5.x); its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            failures=(
                (
                    "v4-module-names",
                    "ImportError: cannot import name 'find_pruneable_heads_and_indices' from 'transformers.pytorch_utils'",
                ),
            ),
        ),
        ZooEntry(
            "v4_attention_probe",
            "lgv4probe",
            "(a) a LLaVA-style wrapper written for transformers 4.x whose _supports_sdpa / _supports_flash_attn_2 are "
            "properties asking self.language_model: 4.5x+ probe them on the instance while __init__ runs, before the "
            "language model exists; once constructed, its buffers are not rebuilt",
            failure_mode="a",
            expected=tuple(ExpectedFinding(f"language_model.{f.tensor}", f.status) for f in TOY_NP),
            failures=(
                (
                    "v4-attention-probe",
                    "AttributeError: 'LgV4ProbeForCausalLM' object has no attribute '_supports_sdpa'",
                ),
            ),
        ),
        ZooEntry(
            "v4_rope_default",
            "lgv4ropedefault",
            "(a) remote code whose rotary embedding looks up ROPE_INIT_FUNCTIONS['default'] (4.4x-era Llama copies): "
            "transformers 5 dropped the key (KeyError 'default'); its rotary inv_freq and other buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP + (ExpectedFinding("rotary.inv_freq", Status.UNINITIALIZED),),
            failures=(("v4-rope-init-default", "KeyError: 'default'"),),
        ),
        *(_yarn(suffix, how, dtype) for suffix, how, dtype in _YARN_DTYPES),
        ZooEntry(
            "conditional_state",
            "lgcond",
            "(a) a quantized-cache bound registered as a non-persistent buffer from a local that __init__ assigns under "
            "an if of the config (published code with a quantized KV cache): transformers 5 leaves it uninitialized, "
            "and a recompute must take the same branch",
            failure_mode="a",
            expected=TOY_NP + (ExpectedFinding("bound.cache_qmax", Status.UNINITIALIZED),),
        ),
        ZooEntry(
            "attribute_never_initialized",
            "lgcodegen",
            "(a) a CodeGen-style attention scale kept as a plain tensor attribute of a module whose parameters all load: "
            "transformers 5 builds it on meta and never calls _init_weights for that module, so no branch there can "
            "rebuild it",
            failure_mode="a",
            expected=TOY_NP + (ExpectedFinding("scaled.scale_attn", Status.ON_META),),
            fix="partly: transformers 5 never calls _init_weights for the module holding scale_attn (its parameters "
            "all load), so a branch there would never run: refused with the reason and the line; the rest is fixed",
        ),
        ZooEntry(
            "v4_nested_load",
            "lgv4nested",
            "(a) remote code that loads a pretrained trunk with AutoModel.from_pretrained inside its own __init__ (as "
            "bi-encoders wrap a published model): transformers 5 builds the outer model on the meta device and refuses "
            "the nested load; once constructed, its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
            submodel=("trunk", "trunk", "trunk_path"),
            failures=(
                (
                    "v4-nested-from-pretrained",
                    "RuntimeError: You are using `from_pretrained` with a meta device context manager or `torch.set_default_device('meta')`.",
                ),
            ),
            fix="not fixable: its constructor loads another model with from_pretrained (v4-nested-from-pretrained: build it from its config, by hand)",
        ),
        ZooEntry(
            "device_picking",
            "lgdevice",
            "(a) remote code that builds every layer with device=config.init_device itself (OLMo-style): a weightless "
            "construction must not allocate it; its buffers are not rebuilt",
            failure_mode="a",
            expected=TOY_NP,
        ),
        ZooEntry(
            "int8_buffers",
            "lgint8",
            "(a) an int8 checkpoint whose remote code quantizes itself (CodeGen/ChatGLM-era): int8 weights and scales "
            "are persistent buffers made in __init__ on the CPU, whatever device a loader asks for; its buffers are not "
            "rebuilt",
            failure_mode="a",
            expected=TOY_NP,
        ),
        ZooEntry(
            "v4_tied_list",
            "lgv4s2s",
            "(a) an encoder-decoder written for transformers 4.x, T5-style: encoder and decoder embedding tables tied to "
            "the shared one and listed in a v4 _tied_weights_keys list, absent from the checkpoint; transformers 5 leaves "
            "them untied, holding random initialization (a silent pass for a key-based loading report), and its positions "
            "table uninitialized",
            failure_mode="a",
            expected=(
                ExpectedFinding("positions.table", Status.UNINITIALIZED),
                ExpectedFinding("positions.index", Status.UNINITIALIZED),
                ExpectedFinding("encoder.block.attn.causal_mask", Status.UNINITIALIZED),
                ExpectedFinding("decoder.block.attn.causal_mask", Status.UNINITIALIZED),
                ExpectedFinding("encoder.embed_tokens.weight", Status.MISMATCH),
                ExpectedFinding("decoder.embed_tokens.weight", Status.MISMATCH),
            ),
            drop_keys=("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
            fix="not fixable: its v4 tie list becomes transformers 5's mapping, but with tie_word_embeddings off transformers 5 ties nothing (4.x's tie_weights called the model's own _tie_weights): proof (a) sees both tables still untied; tie them in the model's code by hand",
        ),
        ZooEntry(
            "declined_tie",
            "lgs2shead",
            "a causal-LM head around an encoder-decoder (T5ForSequenceClassification-style) built with "
            "tie_word_embeddings switched off: its checkpoint holds three different embedding tables, its config "
            "comes back tying, transformers declines the tie and keeps every table's checkpoint value, while the nested "
            "encoder-decoder's own tie list still names the tie: loads exactly",
            config={"rebuild_buffers_in_init": True},
            config_after={"tie_word_embeddings": False},
            fix="clean",
        ),
        ZooEntry(
            "rebuilt_before_use",
            "lgrebuilt",
            "(a) a position table cached the 4.3x-era rotary way: computed in __init__ as a non-persistent buffer with "
            "max_seq_len_cached = None, so the first forward pass rebuilds it before reading it; transformers 5 leaves "
            "it uninitialized after loading, and no output ever sees that (wrong after load, rebuilt before use)",
            failure_mode="a",
            config={"rebuild_buffers_in_init": True},
            expected=(ExpectedFinding("rotary.cached", Status.UNINITIALIZED),),
        ),
        ZooEntry(
            "clean",
            "lgtoy",
            "non-persistent buffers, a scaled head and a bare parameter, all rebuilt by _init_weights: loads exactly",
            config={"use_logit_scale": True, "scaled_lm_head": True, "rebuild_buffers_in_init": True},
            fix="clean",
        ),
    ]
}


def entries() -> list[ZooEntry]:
    """All zoo entries, in a stable order."""
    return list(ENTRIES.values())


def get(name: str) -> ZooEntry:
    """The entry called ``name``; raises :class:`loadguard.errors.UnknownZooEntryError` otherwise."""
    try:
        return ENTRIES[name]
    except KeyError:
        raise UnknownZooEntryError(name, sorted(ENTRIES)) from None
