"""Stand-ins with transformers 4.x's meaning for names 5.x removed together with their home, each self-contained (it
imports what it needs inside): what ``v4-module-names`` gives back at load time, and, as source, what its fix writes
into a model file (:func:`loadguard.workarounds.v4_names.fallback`)."""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable
from typing import Any


def find_pruneable_heads_and_indices(heads, n_heads: int, head_size: int, already_pruned_heads):
    """4.57 ``transformers.pytorch_utils``: the heads to prune (minus those already pruned) and the flat indices to keep."""
    import torch

    mask = torch.ones(n_heads, head_size)
    heads = set(heads) - already_pruned_heads
    for head in heads:
        head = head - sum(1 if h < head else 0 for h in already_pruned_heads)
        mask[head] = 0
    mask = mask.view(-1).contiguous().eq(1)
    index = torch.arange(len(mask))[mask].long()
    return heads, index


def prune_linear_layer(layer, index, dim: int = 0):
    """4.57 ``transformers.pytorch_utils``: a new ``nn.Linear`` keeping only ``index`` along ``dim``."""
    import torch
    from torch import nn

    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).detach().clone()
    bias = None
    if layer.bias is not None:
        bias = (layer.bias.clone() if dim == 1 else layer.bias[index].clone()).detach()
    size = list(layer.weight.size())
    size[dim] = len(index)
    new = nn.Linear(size[1], size[0], bias=bias is not None).to(layer.weight.device)
    with torch.no_grad():
        new.weight.copy_(weight.contiguous())
        if bias is not None:
            new.bias.copy_(bias.contiguous())
    return new


def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length: int = 0):
    """Older 4.x (Llama, OPT, Bart, Mistral ... before 4.36): an additive causal mask (bsz, 1, tgt, tgt + past)."""
    import torch

    batch, length = input_ids_shape
    rows = torch.arange(length, device=device)[:, None]
    columns = torch.arange(length + past_key_values_length, device=device)[None, :]
    blocked = columns > rows + past_key_values_length  # the future
    mask = torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill(blocked, torch.finfo(dtype).min)
    return mask[None, None].expand(batch, 1, length, length + past_key_values_length)


def _expand_mask(mask, dtype, tgt_len=None):
    """Older 4.x: a padding mask (bsz, src) as an additive mask (bsz, 1, tgt, src)."""
    import torch

    batch, source_length = mask.shape
    target_length = source_length if tgt_len is None else tgt_len
    inverted = 1.0 - mask[:, None, None, :].expand(batch, 1, target_length, source_length).to(dtype)
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


def _bloom_make_causal_mask(input_ids_shape, device, past_key_values_length: int):
    """Older 4.x Bloom: a boolean mask, True where a position may not be attended."""
    import torch

    batch_size, target_length = input_ids_shape
    mask = torch.empty((target_length, target_length + past_key_values_length), dtype=torch.bool, device=device)
    seq_ids = torch.arange(target_length, device=device)
    mask[:, past_key_values_length:] = seq_ids[:, None] < seq_ids[None, :]
    if past_key_values_length > 0:
        mask[:, :past_key_values_length] = False
    return mask[None, None, :, :].expand(batch_size, 1, target_length, target_length + past_key_values_length)


def _bloom_expand_mask(mask, tgt_length):
    """Older 4.x Bloom: a padding mask (bsz, src) as a boolean mask (bsz, 1, tgt, src), True where padded."""
    return (~(mask[:, None, None, :].to(bool))).expand(
        mask.shape[0], 1, tgt_length if tgt_length is not None else mask.shape[1], mask.shape[1]
    )


def v4_default_rope_parameters(config=None, device=None, seq_len=None, **rope_kwargs):
    """transformers 4's ``ROPE_INIT_FUNCTIONS["default"]`` (``_compute_default_rope_parameters``): the inverse
    frequencies of plain RoPE, ``1 / base ** (arange(0, dim, 2) / dim)`` with ``dim = head_dim *
    partial_rotary_factor``, and an attention factor of 1.0. ``base`` is ``config.rope_theta``, or where a 5.x config
    keeps it, ``config.rope_parameters["rope_theta"]``; 4.x's ``rope_kwargs`` (``base``, ``dim``) win when given."""
    import torch

    if rope_kwargs:
        base, dim = rope_kwargs["base"], int(rope_kwargs["dim"])
    else:
        base = getattr(config, "rope_theta", None)
        if base is None:
            base = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        partial = getattr(config, "partial_rotary_factor", None)
        if partial is None:
            partial = (getattr(config, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * partial)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
    return inv_freq, 1.0


# helpers native model modules had before 4.57 (the diff lists them from the older releases), still imported by remote
# code: given in every native model module
def prune_conv1d_layer(layer, index, dim: int = 1):
    """4.57 ``transformers.pytorch_utils``: a new ``Conv1D`` (weights transposed, as GPT-2's) keeping only ``index``
    along ``dim``."""
    import torch
    from transformers.pytorch_utils import Conv1D

    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).detach().clone()
    bias = (layer.bias if dim == 0 else layer.bias[index]).detach().clone()
    size = list(layer.weight.size())
    size[dim] = len(index)
    new = Conv1D(size[1], size[0]).to(layer.weight.device)
    with torch.no_grad():
        new.weight.copy_(weight.contiguous())
        new.bias.copy_(bias.contiguous())
    return new


def assert_device_map(device_map, num_blocks):
    """4.x ``transformers.utils.model_parallel_utils``: every block on exactly one device, none missing, none extra."""
    listed = [block for blocks in device_map.values() for block in blocks]
    duplicated = sorted({block for block in listed if listed.count(block) > 1})
    missing = [block for block in range(num_blocks) if block not in listed]
    extra = [block for block in listed if not 0 <= block < num_blocks]
    if duplicated:
        raise ValueError(f"Duplicate attention blocks specified in device_map: {duplicated}")
    if missing:
        raise ValueError(
            f"There are attention blocks for this model that are not specified in the device_map: {missing}"
        )
    if extra:
        raise ValueError(f"The device_map contains more attention blocks than this model has: {extra}")


def get_device_map(n_layers, devices):
    """4.x ``transformers.utils.model_parallel_utils``: the layers spread evenly over ``devices``, in order."""
    import math

    per_device = int(math.ceil(n_layers / len(devices)))
    layers = list(range(n_layers))
    return dict(zip(devices, [layers[i : i + per_device] for i in range(0, n_layers, per_device)]))


def top_k_top_p_filtering(
    logits, top_k: int = 0, top_p: float = 1.0, filter_value: float = -float("Inf"), min_tokens_to_keep: int = 1
):
    """4.x ``transformers.top_k_top_p_filtering`` (gone since 4.39): logits outside the ``top_k`` best and outside the
    smallest set of probability ``top_p`` set to ``filter_value``, at least ``min_tokens_to_keep`` kept."""
    import torch

    if top_k > 0:
        keep = max(top_k, min_tokens_to_keep)
        threshold = torch.topk(logits, min(keep, logits.size(-1)))[0][..., -1, None]
        logits = logits.masked_fill(logits < threshold, filter_value)
    if 0 <= top_p < 1.0:
        ordered, indices = torch.sort(logits, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -min_tokens_to_keep:] = False
        logits = logits.masked_fill(remove.scatter(-1, indices, remove), filter_value)
    return logits


def loss_kwargs():
    """4.4x-4.50 ``transformers.utils.LossKwargs``: the keyword arguments a model's loss takes, as a ``TypedDict``
    (type hints only: ``Unpack[LossKwargs]``)."""
    from typing import TypedDict

    class LossKwargs(TypedDict, total=False):
        num_items_in_batch: int | None

    return LossKwargs


OLDER = {"_make_causal_mask": _make_causal_mask, "_expand_mask": _expand_mask}
OLDER_BLOOM = {"_make_causal_mask": _bloom_make_causal_mask, "_expand_mask": _bloom_expand_mask}
OWN: dict[str, Callable[[], Any]] = {
    "find_pruneable_heads_and_indices": lambda: find_pruneable_heads_and_indices,
    "prune_linear_layer": lambda: prune_linear_layer,
    "prune_conv1d_layer": lambda: prune_conv1d_layer,
    "assert_device_map": lambda: assert_device_map,
    "get_device_map": lambda: get_device_map,
    "top_k_top_p_filtering": lambda: top_k_top_p_filtering,
    "LossKwargs": loss_kwargs,
    "_compute_default_rope_parameters": lambda: v4_default_rope_parameters,
}
SOURCES: dict[str, str] = {
    "LossKwargs": (
        "from typing import Optional, TypedDict\n\n\nclass LossKwargs(TypedDict, total=False):\n"
        "    num_items_in_batch: Optional[int]"
    ),
}
"""The source of a stand-in that is no function (a class), as a fix writes it into a model's file."""
VANISHED: dict[str, dict[str, str | None]] = {
    "transformers.utils.model_parallel_utils": {"assert_device_map": None, "get_device_map": None},
}
"""Modules 4.x had that 5.x removed whole, with the names code imports from them: given back as modules of stand-ins."""


def definition_named(function: Callable, name: str) -> str:
    """The source of a self-contained function of loadguard's (it imports what it needs inside), defined as ``name``:
    what a source fix writes into a model file in place of a name transformers 5 removed."""
    text = textwrap.dedent(inspect.getsource(function))
    return re.sub(rf"^def {re.escape(function.__name__)}\(", f"def {name}(", text, count=1, flags=re.M)


def stand_in_source(name: str, bound: str) -> str | None:
    """What a fix writes for the stand-in of ``name``, defined as ``bound``: a function's source renamed, a class's
    source (bound under the other name too where the file imports it as one)."""
    if name in SOURCES:
        return SOURCES[name] + (f"\n\n\n{bound} = {name}" if bound != name else "")
    made = OWN[name]()
    return definition_named(made, bound) if inspect.isfunction(made) else None


__all__ = [
    "OLDER",
    "OLDER_BLOOM",
    "OWN",
    "SOURCES",
    "VANISHED",
    "assert_device_map",
    "definition_named",
    "get_device_map",
    "loss_kwargs",
    "prune_conv1d_layer",
    "stand_in_source",
    "top_k_top_p_filtering",
    "find_pruneable_heads_and_indices",
    "prune_linear_layer",
    "v4_default_rope_parameters",
]
