"""What a model's ``generate`` hands back, taken apart: inputs moved to a device, the generated ids of a plain tensor
output, the hidden state behind a generation step."""

from __future__ import annotations

from typing import Any

import torch


def to_device(value: Any, device) -> Any:
    """Tensors, and tensors in (nested) lists, moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    return value


def new_tokens(sequences: torch.Tensor, input_ids: torch.Tensor | None, max_new_tokens: int | None) -> list[int]:
    """The generated ids of a plain-tensor generate output: after the prompt when it starts with it (and
    is long enough to hold it), the whole sequence otherwise (a generate from inputs_embeds)."""
    row = sequences[0]
    prompt = input_ids[0] if input_ids is not None else None
    if (
        prompt is not None
        and row.shape[0] > prompt.shape[0]
        and torch.equal(row[: prompt.shape[0]].to(prompt.device), prompt)
    ):
        return row[prompt.shape[0] :].tolist()
    if max_new_tokens is not None and row.shape[0] > max_new_tokens:
        return row[-max_new_tokens:].tolist()
    return row.tolist()


def last_hidden(output, step: int):
    """The last layer's hidden state at the position that produced generation step ``step``."""
    states = getattr(output, "hidden_states", None)
    if not states or step >= len(states) or not states[step]:
        return None
    return states[step][-1][0, -1]
