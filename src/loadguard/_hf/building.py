"""A model folder's model built from its config alone, the same on every transformers (4.x and 5.x: torch, accelerate
and transformers' own auto classes only): the class a load would use, built as a user builds it, and, without a
checkpoint, given synthetic values drawn from each parameter's name, so that two releases build the same model."""

from __future__ import annotations

import contextlib
import zlib
from typing import Any

MAX_SYNTHETIC = 300_000_000
"""Parameters a model may have to be built with synthetic weights (no checkpoint): 1.2 GB in float32."""


def class_for(config: Any, class_name: str | None = None):
    """The class that loads a model: the auto class whose ``auto_map`` entry names ``class_name`` (the class the other
    release loaded), transformers' own class of that name, else the causal-LM entry of ``auto_map``, else
    ``AutoModel``."""
    import transformers

    auto_map = getattr(config, "auto_map", None) or {}
    if class_name:
        for auto, reference in auto_map.items():
            if str(reference).rpartition(".")[2] == class_name and hasattr(transformers, auto):
                return getattr(transformers, auto)
        if hasattr(transformers, class_name):
            return getattr(transformers, class_name)
    if "AutoModelForCausalLM" in auto_map or not auto_map:
        return transformers.AutoModelForCausalLM
    return transformers.AutoModel


def built_from_config(cls: Any, config: Any):
    """``cls`` built from ``config`` as a user builds it: an auto class through ``from_config`` (remote code trusted),
    a model class through ``_from_config``."""
    if hasattr(cls, "from_config"):
        return cls.from_config(config, trust_remote_code=True)
    return cls._from_config(config)


def synthetic(folder: str, class_name: str | None = None, context: Any = None) -> tuple[Any, str]:
    """``(model, "")``: the model of ``folder`` built from its config (its ``__init__``, its ``_init_weights``), every
    parameter then set to values drawn from its own name (:func:`fill`): the same model on every release, without a
    checkpoint. ``(None, why)`` for one with more than :data:`MAX_SYNTHETIC` parameters. ``context``: what to build it
    in (the workarounds its code needs)."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    cls = class_for(config, class_name)

    def build():
        return built_from_config(cls, config)

    with context if context is not None else contextlib.nullcontext():
        with init_empty_weights(include_buffers=False):
            empty = build()
        count = sum(p.numel() for p in empty.parameters())
        if count > MAX_SYNTHETIC:
            return None, f"{count:,} parameters are too many to build without weights here (at most {MAX_SYNTHETIC:,})"
        # the class the auto class resolved (remote code given GenerationMixin as from_pretrained gives it), built
        # once more: a second from_config would find the class registered and skip that step
        torch.manual_seed(0)
        model = type(empty)._from_config(config).eval()
    fill(model)
    return model, ""


def fill(model: Any) -> None:
    """Every parameter set from a generator seeded with its name: matrices N(0, 0.02), vectors named ``weight`` 1 and the
    rest 0 (a norm's scale and shift); a tied parameter is set once."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.is_meta:
                continue
            if parameter.dim() < 2:
                parameter.fill_(1.0 if name.endswith("weight") else 0.0)
                continue
            generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            drawn = torch.randn(parameter.shape, generator=generator, dtype=torch.float32) * 0.02
            parameter.copy_(drawn.to(device=parameter.device, dtype=parameter.dtype))


__all__ = ["MAX_SYNTHETIC", "built_from_config", "class_for", "fill", "synthetic"]
