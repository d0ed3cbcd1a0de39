"""Every tensor of a model once per name: what it is, where it lives, and which names share it.

Parameters and buffers, and plain tensor attributes of modules (``self.inv_freq = ...`` without
``register_buffer``, as Qwen-1's rotary embedding keeps it): transformers 5 never touches those on load, so
one computed in ``__init__`` stays on the meta device, and nobody looks at it unless we do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class TensorEntry:
    """One name under which a model holds a tensor.

    ``alias_of`` is the first name (in registration order) of the same tensor when this name is a
    second registration of it (a buffer shared by two modules, tied weights); ``None`` otherwise.
    """

    name: str
    kind: str  # "parameter" | "buffer" | "attribute" (a plain tensor attribute of a module)
    persistent: bool
    dtype: torch.dtype
    shape: tuple[int, ...]
    device: torch.device
    module: str
    attribute: str
    alias_of: str | None = None

    @property
    def on_meta(self) -> bool:
        return self.device.type == "meta"


class Inventory:
    """The tensors of ``model`` by name, including every alias.

    Example::

        inv = Inventory(model)
        [e.name for e in inv if not e.persistent]     # non-persistent buffers, every alias
        inv.tensor("resampler.pos_embed")             # the live tensor (never copied)
    """

    def __init__(self, model: nn.Module):
        self._model = model
        self._entries: dict[str, TensorEntry] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        first_name: dict[object, str] = {}
        for module_name, module in model.named_modules(remove_duplicate=False):
            non_persistent = getattr(module, "_non_persistent_buffers_set", set())
            attributes = {
                k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor) and not k.startswith("__")
            }
            for kind, table in (
                ("parameter", module._parameters),
                ("buffer", module._buffers),
                ("attribute", attributes),
            ):
                for attribute, tensor in table.items():
                    if tensor is None:
                        continue
                    name = f"{module_name}.{attribute}" if module_name else attribute
                    if name in self._entries:
                        continue  # a module reachable under two paths: the first path names it
                    identity = _identity(tensor)
                    alias_of = first_name.setdefault(identity, name)
                    self._entries[name] = TensorEntry(
                        name=name,
                        kind=kind,
                        persistent=kind == "parameter" or (kind == "buffer" and attribute not in non_persistent),
                        dtype=tensor.dtype,
                        shape=tuple(tensor.shape),
                        device=tensor.device,
                        module=module_name,
                        attribute=attribute,
                        alias_of=None if alias_of == name else alias_of,
                    )
                    self._tensors[name] = tensor

    def __iter__(self):
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> TensorEntry:
        return self._entries[name]

    def tensor(self, name: str) -> torch.Tensor:
        """The live tensor registered under ``name``."""
        return self._tensors[name]

    def aliases(self, name: str) -> list[str]:
        """Every name sharing ``name``'s tensor, itself included, in registration order."""
        canonical = self._entries[name].alias_of or name
        return [e.name for e in self if e.name == canonical or e.alias_of == canonical]

    @property
    def non_persistent_buffers(self) -> list[TensorEntry]:
        """What ``state_dict()`` leaves out and the model's code computes: non-persistent buffers and tensor
        attributes, every alias."""
        return [e for e in self if not e.persistent]

    @property
    def state_entries(self) -> list[TensorEntry]:
        """The names ``state_dict()`` holds: parameters and persistent buffers, aliases included."""
        return [e for e in self if e.persistent]

    def total_bytes(self, entries) -> int:
        return sum(self._tensors[e.name].numel() * self._tensors[e.name].element_size() for e in entries)


def _identity(tensor: torch.Tensor) -> object:
    """What makes two registrations the same tensor: the object, or the same bytes viewed the same way."""
    if tensor.device.type == "meta":
        return id(tensor)
    try:
        pointer = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return id(tensor)
    if pointer == 0:  # empty storage: only the object tells them apart
        return id(tensor)
    return (tensor.device, pointer, tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
