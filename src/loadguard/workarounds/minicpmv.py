"""Workarounds for MiniCPM-V 2.6 (and the zoo's MiniCPM-V-shaped model)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ._registry import workaround

MINICPMV = ("minicpmv", "lgminicpmv", "MiniCPMV", "LgMiniCPMV")


def _has(module, name: str) -> bool:
    """``hasattr`` for a model's modules, whose own ``__getattr__`` may raise anything for a name they lack."""
    try:
        getattr(module, name)
    except Exception:
        return False
    return True


def _pos_cache_modules(model) -> list[tuple[str, Any]]:
    return [
        (name, module)
        for name, module in model.named_modules()
        if _has(module, "_set_2d_pos_cache") and _has(module, "pos_embed")
    ]


def _pos_cache_targets(model) -> list[str]:
    return [f"{name}.pos_embed" if name else "pos_embed" for name, _ in _pos_cache_modules(model)]


@workaround(
    "minicpmv-pos-cache",
    applies_to=MINICPMV,
    stage="after_load",
    reason="resampler pos_embed: a non-persistent 2D sin/cos table transformers v5 leaves uninitialized; "
    "recomputed with the model's own _set_2d_pos_cache",
    upstream="transformers#48892",
    targets=_pos_cache_targets,
    source_fix="none of its own: `loadguard fix` recomputes pos_embed from the line that made it (an _init_weights branch calling _set_2d_pos_cache)",
)
def minicpmv_pos_cache(model) -> int:
    restored = 0
    for _, module in _pos_cache_modules(model):
        module._set_2d_pos_cache(module.max_size, module.pos_embed.device)
        restored += 1
    return restored


def _generate_needs_adapting(runner) -> bool:
    """Its generate takes the tokenizer (to find its terminators) and a ``decode_text`` switch, and passes
    unknown keywords such as the processor's ``image_sizes`` down to the language model's generate."""

    generate = runner.model.generate
    if getattr(generate, "_loadguard_wrapped", False):
        return False
    parameters = inspect.signature(generate).parameters
    return "tokenizer" in parameters or "decode_text" in parameters


@workaround(
    "minicpmv-26-runner",
    applies_to=MINICPMV,
    stage="runner",
    reason="MiniCPM-V's generate needs tokenizer= to find its terminators, decodes text unless decode_text=False "
    "and passes the processor's image_sizes on to the language model: wrap it to get token ids",
    upstream="vllm#51432",
    needed=_generate_needs_adapting,
    source_fix="none: it adapts an engine's test runner to MiniCPM-V's generate, not the model",
)
def minicpmv_26_runner(runner):
    original = runner.model.generate
    tokenizer = runner.tokenizer

    @functools.wraps(original)
    def generate(*args, image_sizes=None, **kwargs):
        kwargs.setdefault("decode_text", False)
        kwargs.setdefault("tokenizer", tokenizer)
        return original(*args, **kwargs)

    generate._loadguard_wrapped = True
    runner.model.generate = generate
    return runner
