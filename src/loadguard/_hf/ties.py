"""Which tensors a model declares tied to which: the evidence the ``tied_weights`` check compares against.

transformers 5 declares ties as a mapping (``_tied_weights_keys = {target: source}``), expanded per instance into
``all_tied_weights_keys`` for the ties its config enables; code written for transformers 4 lists the tied names
(``_tied_weights_keys = [...]``) and ties them itself (``tie_weights`` / ``_tie_weights``), to the input embeddings.
A tie that a load did not keep leaves the target holding whatever initialized it: a value comparison with its
source is the only way to see it (transformers' loading report lists it as neither missing nor mismatched).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

from .replay import v4_ties


@dataclass(frozen=True)
class Tie:
    target: str
    source: str
    how: str
    """``mapping`` (transformers 5's ``all_tied_weights_keys``: authoritative) or ``v4 list`` (a name listed in a
    4.x-style ``_tied_weights_keys``, tied to the input embeddings as 4.x's ``tie_weights`` did)."""


def _own(module: nn.Module, name: str):
    """An attribute from the instance or its class, never through a module's own ``__getattr__``."""
    if name in vars(module):
        return vars(module)[name]
    for klass in type(module).__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def declared(model: nn.Module) -> list[Tie]:
    """Every tie the running transformers applied to ``model`` (and code written for transformers 4 would have
    applied under the same config), with names as the model's own ``named_parameters``.

    transformers 5: the ``all_tied_weights_keys`` of the outermost ``PreTrainedModel``. It gathers its sub-models' ties
    as their own configs enable them, and a load drops from it a tie it declines (the checkpoint holds both tensors with
    different values); a nested model's own mapping keeps such a tie, so it is not read when an outer one exists.
    transformers 4 (a list-style ``_tied_weights_keys``): see :func:`_v4_list`."""
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover - loadguard requires transformers
        return []
    ties: dict[str, Tie] = {}
    mapped: list[str] = []  # prefixes of models whose mapping covers their whole subtree
    for prefix, module in model.named_modules():
        if not isinstance(module, PreTrainedModel):
            continue
        dot = f"{prefix}." if prefix else ""
        listed = _own(module, "_tied_weights_keys")
        expanded = vars(module).get("all_tied_weights_keys")
        covered = any(prefix == outer or prefix.startswith(f"{outer}.") or outer == "" for outer in mapped)
        if isinstance(expanded, dict) and not covered:
            mapped.append(prefix)
            for target, source in expanded.items():
                if isinstance(target, str) and isinstance(source, str):
                    ties.setdefault(dot + target, Tie(dot + target, dot + source, "mapping"))
        if isinstance(listed, (list, tuple)):
            for tie in _v4_list(module, dot, listed):
                ties.setdefault(tie.target, tie)
    return list(ties.values())


def _v4_list(module: nn.Module, dot: str, listed) -> list[Tie]:
    """transformers 4's meaning of a ``_tied_weights_keys`` list, under the model's own config: its ``tie_weights``
    tied the output embeddings to the input embeddings when the (text) config says ``tie_word_embeddings``, and called
    every module's ``_tie_weights()``, the model's own code, which ties what it ties (often only under a config flag).
    That code is replayed with every change held back (:func:`loadguard._hf.replay.v4_ties`) and the listed weights it ties
    are expected tied; where it cannot run on this transformers (it calls a 4.x helper that is gone), a listed
    embedding table is expected tied to the shared input embeddings, as such code does. Only weights: a listed bias
    follows other rules, and is left alone."""

    try:
        embeddings = module.get_input_embeddings()
    except Exception:  # the model's own code: whatever it raises, there is no source to name
        return []
    source = next((name for name, m in module.named_modules() if m is embeddings), None)
    if source is None or not isinstance(getattr(embeddings, "weight", None), nn.Parameter):
        return []
    source_name = f"{dot}{source}.weight" if source else f"{dot}weight"
    config = getattr(module, "config", None)
    try:  # transformers ties by the text config's setting (a VLM's top-level config may say otherwise)
        text_config = config.get_text_config(decoder=True) if config is not None else None
    except Exception:
        text_config = config
    # a config without the attribute: 4.x's default, True (transformers 5's configs may lack it; 4.x's never did)
    tie_words = bool(getattr(text_config, "tie_word_embeddings", getattr(config, "tie_word_embeddings", True)))
    try:
        output = module.get_output_embeddings()
    except Exception:  # the model's own code
        output = None
    output_name = next(
        (
            f"{dot}{name}.weight" if name else f"{dot}weight"
            for name, m in module.named_modules()
            if output is not None and m is output
        ),
        None,
    )
    replayed = v4_ties(module)
    out = []
    for target in listed:
        if not isinstance(target, str) or not target.endswith(".weight") or any(c in target for c in "\\()[]*+?^$|"):
            continue
        try:
            owner = module.get_submodule(target.rsplit(".", 1)[0])
        except Exception:  # a name the module does not have, or its own code raising
            continue
        full = dot + target
        if full == source_name:
            continue
        if tie_words and (full == output_name or (output_name is None and not isinstance(owner, nn.Embedding))):
            out.append(Tie(full, source_name, "v4 list"))
        elif replayed is not None and target in replayed:
            out.append(Tie(full, dot + replayed[target], "v4 list"))
        elif replayed is None and isinstance(owner, nn.Embedding):
            out.append(Tie(full, source_name, "v4 list"))
    return out


def left_out_by_save(model: nn.Module) -> set[str]:
    """The keys a ``save_pretrained`` of this code leaves out of its checkpoint, as transformers 4.x and 5.x both
    decide: of the names that share one tensor, those its declared tied keys (a 4.x list, a 5.x mapping's targets, each
    module's own, as patterns) name are dropped, all but one; and the targets of the ties it declares."""

    patterns: list[str] = []
    for prefix, module in model.named_modules():
        listed = vars(type(module)).get("_tied_weights_keys", getattr(module, "_tied_weights_keys", None))
        names = (
            list(listed) if isinstance(listed, (list, tuple, dict)) else []
        )  # a 5.x mapping: its keys are the targets
        patterns += [f"{re.escape(prefix)}\\.{name}" if prefix else name for name in names if isinstance(name, str)]
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    dropped = {tie.target for tie in declared(model)}
    for names in groups.values():
        if len(names) < 2:
            continue
        found = 0
        for name in sorted(names):
            if any(re.search(pattern, name) for pattern in patterns):
                found += 1
                if found < len(names):
                    dropped.add(name)
    return dropped


def saved_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict a ``save_pretrained`` of this code writes: the model's own, less :func:`left_out_by_save`."""
    dropped = left_out_by_save(model)
    return {key: value for key, value in model.state_dict().items() if key not in dropped}


__all__ = ["left_out_by_save", "saved_state_dict", "Tie", "declared"]
