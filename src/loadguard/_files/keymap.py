"""Mapping a checkpoint's keys onto a model's ``state_dict()`` names, the way transformers renames them on load."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import torch


class _Keys(Protocol):
    """What a key map needs of a checkpoint (:class:`loadguard._files.checkpoint.Checkpoint` is one): its keys."""

    def keys(self) -> list[str]: ...


@dataclass(frozen=True)
class KeyMap:
    """How a checkpoint's keys meet a model's ``state_dict()`` names.

    ``to_checkpoint`` maps model names to the checkpoint key holding their value; ``fused`` lists model
    names whose value transformers builds from several checkpoint keys (not comparable one to one);
    ``unexpected`` lists checkpoint keys that no model name takes (discarded by a load).
    """

    to_checkpoint: dict[str, str]
    fused: dict[str, str]
    unexpected: tuple[str, ...]


def map_keys(model: torch.nn.Module, checkpoint: _Keys, model_names: list[str]) -> KeyMap:
    """Map checkpoint keys onto ``model_names`` the way transformers renames them on load.

    Uses the renamings transformers exposes (v5 weight conversions, v4 ``_checkpoint_conversion_mapping``,
    legacy ``gamma``/``beta`` names) and the base-model prefix. Keys transformers fuses from several
    checkpoint tensors are reported in ``fused``.
    """
    wanted = set(model_names)
    renamings, converters = _conversions(model)
    prefix = getattr(model, "base_model_prefix", "") or ""
    to_checkpoint: dict[str, str] = {}
    fused: dict[str, str] = {}
    unexpected: list[str] = []
    for key in checkpoint.keys():
        target = _rename(key, renamings)
        candidates = [target, _legacy(target)]
        if prefix:
            candidates += [c[len(prefix) + 1 :] for c in candidates if c.startswith(prefix + ".")]
            candidates += [f"{prefix}.{c}" for c in candidates[:2]]
        match = next((c for c in candidates if c in wanted), None)
        if match is not None and match not in to_checkpoint:
            to_checkpoint[match] = key
            continue
        fused_names = next((names for names in (convert(target) for convert in converters) if names is not None), None)
        if fused_names is not None:
            for name in fused_names:
                forms = [name]
                if prefix:  # a base model loaded from a head checkpoint, or the other way round
                    forms += [name[len(prefix) + 1 :]] if name.startswith(prefix + ".") else [f"{prefix}.{name}"]
                match = next((form for form in forms if form in wanted), None)
                if match is not None:
                    fused.setdefault(match, key)
            continue
        unexpected.append(key)
    for name in fused:
        to_checkpoint.pop(name, None)
    return KeyMap(to_checkpoint, fused, tuple(unexpected))


def _legacy(key: str) -> str:
    if key.endswith(".gamma"):
        return key[: -len("gamma")] + "weight"
    if key.endswith(".beta"):
        return key[: -len("beta")] + "bias"
    return key


def _rename(key: str, renamings) -> str:
    for rename in renamings:
        key = rename(key)
    return key


def _conversions(model):
    """What transformers does to this model's checkpoint keys on load: renaming functions (key -> key)
    and converters (key -> the model names it is fused into, or None when it does not apply)."""
    renamings, converters = [], []
    legacy_map = getattr(model, "_checkpoint_conversion_mapping", None) or {}
    for pattern, replacement in legacy_map.items():
        compiled = re.compile(pattern)
        renamings.append(lambda k, c=compiled, r=replacement: c.sub(r, k))
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming
    except ImportError:  # transformers 4.x: no weight conversions
        return renamings, converters
    try:
        transforms = get_model_conversion_mapping(model)
    except Exception:  # an internal API: never let it break an audit
        return renamings, converters
    for transform in transforms:
        if isinstance(transform, WeightRenaming):
            renamings.append(lambda k, t=transform: t.rename_source_key(k)[0])
        elif isinstance(transform, WeightConverter):

            def convert(key, t=transform):
                renamed, matched = t.rename_source_key(key)
                return list(_expand_targets(t, renamed)) if matched is not None else None

            converters.append(convert)
    return renamings, converters


def _expand_targets(transform, renamed: str):
    yield renamed
    first = transform.target_patterns[0]
    for pattern in transform.target_patterns[1:]:
        yield renamed.replace(first, pattern)


__all__ = ["KeyMap", "map_keys"]
