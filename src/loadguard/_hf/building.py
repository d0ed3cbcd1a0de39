"""A model folder's model built from its config alone, the same on every transformers (4.x and 5.x: torch, accelerate
and transformers' own auto classes only): the class a load would use, built as a user builds it, and, without a
checkpoint, given synthetic values drawn from each parameter's name, so that two releases build the same model."""

from __future__ import annotations

import contextlib
import json
import zlib
from pathlib import Path
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


LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "depth")
"""Config keys that count layers: a shrunk config keeps at most :data:`KEPT_LAYERS` of them."""
KEPT_LAYERS = 2
HEADS = ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads")
KV_HEADS = ("num_key_value_heads", "multi_query_group_num", "n_kv_heads", "kv_n_heads", "num_kv_heads")
WIDTHS = (
    "hidden_size",
    "n_embd",
    "d_model",
    "embed_dim",
    "intermediate_size",
    "ffn_hidden_size",
    "n_inner",
    "ffn_dim",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
"""Config keys that are widths: scaled with the number of heads, so each head keeps its width."""
EXPERTS = {"n_routed_experts": 4, "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2, "moe_top_k": 2}


def shrunk(config: dict) -> tuple[dict, list[str]]:
    """A copy of a config.json document small enough to build, and what changed (``"num_hidden_layers 32->2"``): at
    most two layers (a list as long as the layers, such as ``layer_types``, cut to them), at most 4 attention heads
    (2 key-value groups where it has fewer key-value heads than heads, so the heads still divide), every width scaled
    by the same factor as the heads (each head keeps its width: ``head_dim`` and the rotary sizes are untouched), at
    most 4 experts. The vocabulary, positions and every other key stay as written: token ids and tables sized by
    them mean what they meant. Sub-configs (``text_config``, ``vision_config``, ...) are shrunk the same way."""
    out: dict = {}
    said: list[str] = []
    for key, value in config.items():
        if isinstance(value, dict) and key.endswith("config") and key != "quantization_config":
            out[key], inner = shrunk(value)
            said += [f"{key}.{line}" for line in inner]
        else:
            out[key] = value

    def set_(key: str, value: int) -> None:
        if out[key] != value:
            said.append(f"{key} {out[key]}->{value}")
            out[key] = value

    def ints(keys) -> list[str]:
        return [k for k in keys if isinstance(out.get(k), int) and not isinstance(out.get(k), bool) and out[k] > 0]

    for key in ints(LAYERS):
        layers = out[key]
        set_(key, min(layers, KEPT_LAYERS))
        for other, value in list(out.items()):
            if isinstance(value, list) and len(value) == layers and layers > KEPT_LAYERS:
                out[other] = value[:KEPT_LAYERS]
                said.append(f"{other} cut to its first {KEPT_LAYERS}")
    heads = ints(HEADS)
    if heads:
        old = out[heads[0]]
        groups = [out[k] for k in ints(KV_HEADS)]
        if groups and groups[0] < old and old % groups[0] == 0:
            kv = min(groups[0], 2)
            new = kv * min(old // groups[0], 2)
        else:
            kv, new = None, min(old, 4)
        if new < old and all(out[k] * new % old == 0 for k in ints(WIDTHS)):
            for key in heads:
                set_(key, out[key] * new // old)
            for key in ints(KV_HEADS):
                set_(key, kv if kv is not None else new)
            for key in ints(WIDTHS):
                set_(key, out[key] * new // old)
    for key in ints(EXPERTS):
        set_(key, min(out[key], EXPERTS[key]))
    for key in ints(("n_group", "topk_group")):  # experts split in groups: one group of them
        set_(key, 1)
    return out, said


def synthetic(folder: str, class_name: str | None = None, context: Any = None) -> tuple[Any, str]:
    """``(model, note)``: the model of ``folder`` built from its config (its ``__init__``, its ``_init_weights``), every
    parameter then set to values drawn from its own name (:func:`fill`): the same model on every release, without a
    checkpoint. One with more than :data:`MAX_SYNTHETIC` parameters is built from a shrunk copy of its config
    (:func:`shrunk`), and ``note`` says what was shrunk; ``(None, why)`` when even that is too large. ``context``: what
    to build it in (the workarounds its code needs)."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    cls = class_for(config, class_name)
    note = ""

    def counted():
        with init_empty_weights(include_buffers=False):
            empty = built_from_config(cls, config)
        return empty, sum(p.numel() for p in empty.parameters())

    with context if context is not None else contextlib.nullcontext():
        empty, count = counted()
        if count > MAX_SYNTHETIC:
            document, said = shrunk(json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")))
            if said:
                named = config.name_or_path  # where from_config finds the remote code
                config = type(config).from_dict(document)
                config.name_or_path = named
                empty, smaller = counted()
                note = f"built from a shrunk copy of its config ({count:,} parameters; {smaller:,} shrunk): {', '.join(said)}"
                count = smaller
        if count > MAX_SYNTHETIC:
            return None, f"{count:,} parameters are too many to build without weights here (at most {MAX_SYNTHETIC:,})"
        # the class the auto class resolved (remote code given GenerationMixin as from_pretrained gives it), built
        # once more: a second from_config would find the class registered and skip that step
        torch.manual_seed(0)
        model = type(empty)._from_config(config).eval()
    fill(model)
    return model, note


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


__all__ = ["MAX_SYNTHETIC", "built_from_config", "class_for", "fill", "shrunk", "synthetic"]
