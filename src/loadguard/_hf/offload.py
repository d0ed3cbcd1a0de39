"""Tensors accelerate keeps out of the model on purpose (cpu and disk offload), as its hooks will load them.

With ``device_map`` offload (``from_pretrained``, ``dispatch_model``, ``cpu_offload``, ``disk_offload``), an offloaded
module's parameters (and buffers, with ``offload_buffers``) stay on the meta device; its ``AlignDevicesHook``
loads them from ``hook.weights_map`` at each forward: a CPU state dict, a disk offload folder (``.dat`` files and
``index.json``), or transformers' "offload from the original checkpoint" (index entries naming the checkpoint's
own safetensors files). :class:`Offloaded` finds them and reads them one at a time, so an audit compares what the
model will really compute with; :meth:`Offloaded.replace` puts a repaired value where the hook reads it, in memory
(never in the folder, never in the checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class _Place:
    module: str
    attribute: str
    hook: Any

    @property
    def key(self) -> str:
        """The key in the underlying offload store (the weights map's prefix + the attribute)."""
        return f"{getattr(self.hook.weights_map, 'prefix', '')}{self.attribute}"


class Offloaded:
    """Every tensor of ``model`` held by an accelerate offload hook, by name.

    Example::

        offloaded = Offloaded(model)
        for name in offloaded:
            value = offloaded.value(name)      # read now (disk: one file), as the hook would load it
    """

    def __init__(self, model: nn.Module):
        self._places: dict[str, _Place] = {}
        self._missing: dict[str, str] = {}
        for module_name, module in model.named_modules():
            hook = _align_hook(
                vars(module).get("_hf_hook")
            )  # accelerate sets it on the instance; never the module's own __getattr__
            if hook is None or not getattr(hook, "offload", False) or getattr(hook, "weights_map", None) is None:
                continue
            held = set(_keys(hook.weights_map))
            for attribute in list(module._parameters) + list(module._buffers):
                tensor = (
                    module._parameters.get(attribute)
                    if attribute in module._parameters
                    else module._buffers.get(attribute)
                )
                if tensor is None:
                    continue
                name = f"{module_name}.{attribute}" if module_name else attribute
                if attribute in held:
                    self._places[name] = _Place(module_name, attribute, hook)
                elif tensor.device.type == "meta":
                    self._missing[name] = (
                        "offloaded by accelerate but absent from its weights map: its hook has nothing to load"
                    )

    def __iter__(self) -> Iterator[str]:
        return iter(self._places)

    def __contains__(self, name: str) -> bool:
        return name in self._places

    def __len__(self) -> int:
        return len(self._places)

    @property
    def missing(self) -> dict[str, str]:
        """Offloaded names the hooks hold no value for, with the reason."""
        return dict(self._missing)

    def where(self, name: str) -> str:
        """``disk`` (a file the hook reads) or ``cpu`` (a tensor in memory)."""
        place = self._places[name]
        store = (
            place.hook.weights_map.dataset if hasattr(place.hook.weights_map, "dataset") else place.hook.weights_map
        )
        in_memory = getattr(store, "state_dict", store if isinstance(store, dict) else {})
        return "cpu" if place.key in in_memory else "disk"

    def source(self, name: str) -> tuple[str, str, str | None] | None:
        """(safetensors file, tensor name, dtype) when the hook reads ``name`` straight from a safetensors file (how
        transformers offloads from the original checkpoint); None when it reads memory or an offload folder."""
        place = self._places[name]
        store = (
            place.hook.weights_map.dataset if hasattr(place.hook.weights_map, "dataset") else place.hook.weights_map
        )
        if place.key in (getattr(store, "state_dict", None) or {}):
            return None
        info = (getattr(store, "index", None) or {}).get(place.key)
        if not info or not info.get("safetensors_file"):
            return None
        return info["safetensors_file"], info.get("weight_name", place.key), info.get("dtype")

    def value(self, name: str) -> torch.Tensor:
        """The tensor the hook will load for ``name`` (read from disk now if it lives there)."""
        place = self._places[name]
        return place.hook.weights_map[place.attribute]

    def replace(self, name: str, value: torch.Tensor) -> None:
        """Make the hook load ``value`` for ``name`` from now on (an in-memory override; files are never written)."""
        place = self._places[name]
        weights_map = place.hook.weights_map
        store = weights_map.dataset if hasattr(weights_map, "dataset") else weights_map
        if hasattr(store, "state_dict") and isinstance(store.state_dict, dict):  # OffloadedWeightsLoader: memory first
            store.state_dict[place.key] = value
            if place.key not in store.all_keys:
                store.all_keys.append(place.key)
        elif isinstance(store, dict):
            store[place.key] = value
        else:
            raise TypeError(f"{type(store).__name__} does not take new values")

    def can_replace(self, name: str) -> str | None:
        """None when :meth:`replace` works for ``name``, else why not."""
        store = self._places[name].hook.weights_map
        store = store.dataset if hasattr(store, "dataset") else store
        if (hasattr(store, "state_dict") and isinstance(store.state_dict, dict)) or isinstance(store, dict):
            return None
        return f"accelerate's weights map for it is a {type(store).__name__}, which takes no new values"


def _align_hook(hook):
    """The AlignDevicesHook in ``hook`` (accelerate chains hooks in a SequentialHook)."""
    if hook is None:
        return None
    for candidate in getattr(hook, "hooks", None) or [hook]:
        if hasattr(candidate, "weights_map") and hasattr(candidate, "offload"):
            return candidate
    return None


def _keys(weights_map) -> list[str]:
    """The attribute names a (prefixed) weights map holds."""
    prefix = getattr(weights_map, "prefix", "")
    return [key[len(prefix) :] for key in weights_map] if prefix else list(weights_map)
