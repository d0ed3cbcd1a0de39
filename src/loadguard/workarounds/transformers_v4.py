"""Workarounds that let remote code written for transformers 4.x import and construct on transformers 5.x.

Each gives back one thing 5.x removed, with its 4.x meaning, only while a load (or a construction of the
model's class) runs, and only when the running transformers lacks it (otherwise it does nothing and is
reported stale). None touches buffers or weight initialization. What 4.x meant is proven by
``tests/workarounds/test_transformers_v4.py`` against transformers 4.57's own objects (``make test-compat``).

Found by a census of 11 published remote-code models (DeepSeek-V2/V3, Kimi-K2, InternVL2, MiniCPM-V 2 and
2.6, MiniCPM3, Qwen-1, Falcon, ChatGLM3, Baichuan2) on transformers 5.24, in order of frequency:
``transformers.modeling_attn_mask_utils`` removed (5 models), ``is_torch_fx_available`` removed from
``transformers.utils`` (4), no ``post_init()`` (4, see ``v4-tied-weights-keys``), ``rope_scaling: null``
read back as a dict without ``type`` (2), ``LlamaFlashAttention2`` gone (1), ``config.max_length`` gone (1).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ._registry import Usage, workaround
from ._source_fixes import fallback_import, llama_attention_imports, read_with_defaults, rope_scaling_reads
from .remote_code import has_remote_code

# transformers 4.x's global generation defaults on every config (PretrainedConfig._get_global_generation_defaults)
V4_GENERATION_DEFAULTS: dict[str, Any] = {
    "max_length": 20,
    "min_length": 0,
    "do_sample": False,
    "early_stopping": False,
    "num_beams": 1,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "typical_p": 1.0,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "num_return_sequences": 1,
    "output_scores": False,
    "return_dict_in_generate": False,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "remove_invalid_values": False,
    "exponential_decay_length_penalty": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
}


def _in_transformers(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name == "transformers" or name.startswith("transformers.")


def outside_transformers(depth: int = 2) -> bool:
    """Whether the code that asked (``depth`` frames up, past transformers' attribute-lookup plumbing) is not
    transformers' own (a model's code, a user's, a test's): 4.x answers are for that code only, transformers
    itself keeps seeing what 5.x gives it."""
    frame = sys._getframe(depth)
    while (
        frame is not None and frame.f_code.co_name in ("__getattribute__", "__getattr__") and _in_transformers(frame)
    ):
        frame = frame.f_back
    return frame is not None and not _in_transformers(frame)


@contextlib.contextmanager
def module_attributes(
    module: types.ModuleType, provide: dict[str, Callable[[], Any]], usage: Usage
) -> Iterator[list[str]]:
    """Make ``module`` answer the names in ``provide`` it lacks (``from module import name`` included,
    through a module ``__getattr__``), counting each lookup in ``usage``. Yields the names it provides."""
    missing = {name: factory for name, factory in provide.items() if name not in module.__dict__}
    if not missing:
        yield []
        return
    previous = module.__dict__.get("__getattr__")

    def __getattr__(name: str):
        if name in missing:
            usage.count += 1
            return missing[name]()
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__
    try:
        yield sorted(missing)
    finally:
        if previous is None:
            del module.__getattr__
        else:
            module.__getattr__ = previous


def _has_module(name: str) -> bool:
    try:
        return name in sys.modules or importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _has_attribute(module: str, *names: str) -> bool:
    found = importlib.import_module(module)
    return all(name in vars(found) for name in names)


# ----------------------------------------------------------------------------------------------------
# transformers.modeling_attn_mask_utils


@workaround(
    "v4-attn-mask-utils",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that imports _prepare_4d_attention_mask, _prepare_4d_causal_attention_mask(_for_sdpa) or "
    "AttentionMaskConverter from transformers.modeling_attn_mask_utils, which transformers 5 removed",
    upstream="the model's repository (transformers 5 removed the module)",
    fixes=[("ModuleNotFoundError", r"No module named 'transformers\.modeling_attn_mask_utils'")],
    native=lambda: _has_module("transformers.modeling_attn_mask_utils"),  # 4.x, and 5.25 (deprecated)
    touches=r"modeling_attn_mask_utils",
    source_fix="none needed on transformers 5.25, which has transformers.modeling_attn_mask_utils again (deprecated): port to transformers.masking_utils by hand before it goes",
)
@contextlib.contextmanager
def attn_mask_utils(path, config: dict) -> Iterator[Usage]:
    name = "transformers.modeling_attn_mask_utils"
    usage = Usage()
    if _has_module(name):  # transformers 4.x and 5.25 have it
        yield usage
        return
    from . import _attn_mask_v4

    shim = types.ModuleType(
        name, "transformers 4.x attention-mask helpers, provided by loadguard's v4-attn-mask-utils workaround"
    )
    used: set[str] = set()

    def provider(attribute: str):
        def provide():
            used.add(attribute)
            return getattr(_attn_mask_v4, attribute)

        return provide

    sys.modules[name] = shim
    try:
        with module_attributes(shim, {n: provider(n) for n in _attn_mask_v4.NAMES}, usage):
            yield usage
    finally:
        sys.modules.pop(name, None)
    usage.detail = f"provided {name} with transformers 4.x semantics ({', '.join(sorted(used))})"


# ----------------------------------------------------------------------------------------------------
# transformers.utils.is_torch_fx_available


def is_torch_fx_available() -> bool:
    """transformers 4.x: torch.fx is available whenever torch is."""
    return importlib.util.find_spec("torch") is not None


@workaround(
    "v4-torch-fx-available",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that imports is_torch_fx_available from transformers.utils (removed in transformers 5)",
    upstream="the model's repository (transformers 5 removed the function)",
    fixes=[("ImportError", r"cannot import name 'is_torch_fx_available' from 'transformers\.utils")],
    native=lambda: _has_attribute("transformers.utils", "is_torch_fx_available"),
    touches=r"\bis_torch_fx_available\b",
    source_fix=lambda sources, config, model: fallback_import(
        sources,
        "is_torch_fx_available",
        ("transformers.utils", "transformers.utils.import_utils"),
        "def is_torch_fx_available():\n    return True",
    ),
)
@contextlib.contextmanager
def torch_fx_available(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    modules = [
        importlib.import_module("transformers.utils"),
        importlib.import_module("transformers.utils.import_utils"),
    ]
    with contextlib.ExitStack() as stack:
        provided = [
            stack.enter_context(module_attributes(m, {"is_torch_fx_available": lambda: is_torch_fx_available}, usage))
            for m in modules
        ]
        yield usage
    if any(provided):
        usage.detail = "provided transformers.utils.is_torch_fx_available (4.x: True whenever torch is installed)"


# ----------------------------------------------------------------------------------------------------
# config.rope_scaling


def v4_rope_scaling(parameters: dict | None) -> dict | None:
    """What 4.x's ``config.rope_scaling`` was for 5.x's standardized ``rope_parameters``: None for plain
    rotary embeddings (a config saying ``rope_scaling: null``), the scaling dict otherwise."""
    if parameters is None:
        return None
    plain = parameters.get("rope_type", "default") == "default" and set(parameters) <= {
        "rope_type",
        "rope_theta",
        "partial_rotary_factor",
    }
    return None if plain else parameters


@workaround(
    "v4-rope-scaling",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that reads config.rope_scaling['type']: transformers 5 turns rope_scaling: null into "
    "{'rope_theta': ..., 'rope_type': 'default'} (KeyError: 'type'); the model's code gets None back, as in 4.x",
    upstream="the model's repository (read config.rope_parameters)",
    # the second: 4.3x-era rotary code (Llama's copies) that checks `rope_scaling is None`, then raises on any other type
    fixes=[("KeyError", r"^'type'$"), ("ValueError", r"Unknown RoPE scaling type '?default'?$")],
    native=lambda: (
        not isinstance(importlib.import_module("transformers").PretrainedConfig.__dict__.get("rope_scaling"), property)
    ),
    touches=r"rope_scaling\s*(\[|\.get\(|is\s+(not\s+)?None\b|[!=]=\s*None\b)",
    source_fix=lambda sources, config, model: rope_scaling_reads(sources),
)
@contextlib.contextmanager
def rope_scaling(path, config: dict) -> Iterator[Usage]:
    from transformers import PretrainedConfig

    usage = Usage()
    original = PretrainedConfig.__dict__.get("rope_scaling")
    if not isinstance(original, property):  # transformers 4.x: a plain attribute, nothing to translate
        yield usage
        return

    def getter(self):
        value = original.fget(self)
        if not outside_transformers():
            return value
        translated = v4_rope_scaling(value)
        if translated is not value:
            usage.count += 1
        return translated

    PretrainedConfig.rope_scaling = property(getter, original.fset, original.fdel, original.__doc__)
    try:
        yield usage
    finally:
        PretrainedConfig.rope_scaling = original
    usage.detail = (
        "gave the model's code config.rope_scaling = None for plain rotary embeddings, as transformers 4.x did"
    )


# ----------------------------------------------------------------------------------------------------
# LlamaFlashAttention2 / LlamaSdpaAttention


@workaround(
    "v4-llama-attention-classes",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that imports LlamaFlashAttention2 / LlamaSdpaAttention from the Llama module (gone since "
    "the transformers 4.x attention refactor; 4.57 lacks them too): both become LlamaAttention, which picks its "
    "kernel from config._attn_implementation",
    upstream="the model's repository (import LlamaAttention)",
    fixes=[("ImportError", r"cannot import name 'Llama(FlashAttention2|SdpaAttention)'")],
    native=lambda: _has_attribute(
        "transformers.models.llama.modeling_llama", "LlamaFlashAttention2", "LlamaSdpaAttention"
    ),
    touches=r"\bLlama(FlashAttention2|SdpaAttention)\b",
    source_fix=lambda sources, config, model: llama_attention_imports(sources),
)
@contextlib.contextmanager
def llama_attention_classes(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    names = {"LlamaFlashAttention2": lambda: llama.LlamaAttention, "LlamaSdpaAttention": lambda: llama.LlamaAttention}
    with module_attributes(llama, names, usage) as provided:
        yield usage
    if provided:
        usage.detail = (
            f"provided {', '.join(provided)} as LlamaAttention (its kernel follows config._attn_implementation)"
        )


# ----------------------------------------------------------------------------------------------------
# config.max_length and the other 4.x generation defaults


class _GenerationDefault:
    """A class-level fallback for a generation setting 4.x configs always had (a non-data descriptor: a value
    set on the instance wins). transformers' own code keeps 5.x's behaviour: the attribute is missing."""

    def __init__(self, name: str, value: Any, usage: Usage, from_json: dict):
        self.name, self.value, self.usage, self.from_json = name, value, usage, from_json

    def __get__(self, obj, owner=None):
        if obj is None or not outside_transformers():
            raise AttributeError(self.name)
        self.usage.count += 1
        return self.from_json.get(self.name, self.value)


def _missing_generation_defaults() -> list[str]:
    """The 4.x generation defaults the running transformers' configs lack."""
    from transformers import PretrainedConfig

    probe = PretrainedConfig()
    return [
        name for name in V4_GENERATION_DEFAULTS if not hasattr(probe, name) and name not in PretrainedConfig.__dict__
    ]


@workaround(
    "v4-config-generation-defaults",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that reads config.max_length (or another 4.x generation default: num_beams, top_k, ...), "
    "which transformers 5 configs no longer carry",
    upstream="the model's repository (read generation settings from model.generation_config)",
    fixes=[("AttributeError", r"object has no attribute '(" + "|".join(V4_GENERATION_DEFAULTS) + r")'")],
    native=lambda: not _missing_generation_defaults(),
    touches=r"config\.(" + "|".join(V4_GENERATION_DEFAULTS) + r")\b",
    source_fix=lambda sources, config, model: read_with_defaults(
        sources, {n: V4_GENERATION_DEFAULTS[n] for n in _missing_generation_defaults()}
    ),
)
@contextlib.contextmanager
def config_generation_defaults(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    with config_attributes(
        {name: V4_GENERATION_DEFAULTS[name] for name in _missing_generation_defaults()}, config, usage
    ):
        yield usage
    if usage.count:
        usage.detail = "gave the model's code the transformers 4.x generation defaults on its config (max_length 20, ...; config.json's values where it has them)"


@contextlib.contextmanager
def config_attributes(defaults: dict[str, Any], config: dict, usage: Usage) -> Iterator[None]:
    """Class-level fallbacks on ``PretrainedConfig`` for ``defaults`` (config.json's values where it has them), for
    code outside transformers only; removed after the block."""
    from transformers import PretrainedConfig

    from_json = {name: config[name] for name in defaults if name in config}
    for name, value in defaults.items():
        setattr(PretrainedConfig, name, _GenerationDefault(name, value, usage, from_json))
    try:
        yield
    finally:
        for name in defaults:
            delattr(PretrainedConfig, name)
