"""What transformers itself reports about a load (``from_pretrained(..., output_loading_info=True)``): the evidence
that a tensor was not loaded on purpose.

transformers lists, by the model's own names, the keys the checkpoint lacks (``missing_keys``: initialized by the
model's ``_init_weights``), the checkpoint keys no tensor takes (``unexpected_keys``) and the tensors whose
checkpoint value had another shape (``mismatched_keys``: re-initialized, which a load only allows when asked with
``ignore_mismatched_sizes=True``). The checks use it to tell a tensor initialized on request (``initialized``,
never failing) from one left wrong. It never lists non-persistent buffers or overwritten weights: those are
decided by values, not by this report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoadingInfo:
    missing: frozenset[str] = frozenset()
    unexpected: frozenset[str] = frozenset()
    mismatched: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    """model name -> (the checkpoint's shape, the model's shape)."""

    @classmethod
    def from_transformers(cls, info: Any) -> LoadingInfo | None:
        """From the dict ``output_loading_info=True`` returns (4.57 and 5.x), or None when it is not one."""
        if isinstance(info, LoadingInfo):
            return info
        if not isinstance(info, dict) or "missing_keys" not in info:
            return None
        mismatched: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        for item in info.get("mismatched_keys") or ():
            if isinstance(item, (tuple, list)) and len(item) == 3:
                name, stored, wanted = item
                mismatched[str(name)] = (tuple(stored), tuple(wanted))
            elif isinstance(item, str):
                mismatched[item] = ((), ())
        return cls(
            frozenset(map(str, info.get("missing_keys") or ())),
            frozenset(map(str, info.get("unexpected_keys") or ())),
            mismatched,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "missing_keys": sorted(self.missing),
            "unexpected_keys": sorted(self.unexpected),
            "mismatched_keys": {
                name: {"checkpoint": list(a), "model": list(b)} for name, (a, b) in sorted(self.mismatched.items())
            },
        }


ATTRIBUTE = "loadguard_loading_info"
"""Set on a model loaded through loadguard (``load``, ``HfRunner``, the pytest plugin): its :class:`LoadingInfo`."""


def split(result: Any) -> tuple[Any, LoadingInfo | None]:
    """``from_pretrained``'s return value as (the model, transformers' loading info when it returned one): a model,
    ``(model, loading_info)`` (``output_loading_info=True``), ``(model, unused_kwargs)``, or another tuple a custom
    class returns with the model in it."""
    import torch

    if isinstance(result, torch.nn.Module):
        return result, None
    if isinstance(result, (tuple, list)):
        model = next((item for item in result if isinstance(item, torch.nn.Module)), None)
        info = next((found for item in result if (found := LoadingInfo.from_transformers(item)) is not None), None)
        return (model if model is not None else result), info
    return result, None


def remember(model: Any, info: LoadingInfo | None) -> None:
    if info is None:
        return
    try:
        object.__setattr__(model, ATTRIBUTE, info)
    except (AttributeError, TypeError):
        pass


def of(model: Any) -> LoadingInfo | None:
    found = vars(model).get(ATTRIBUTE) if hasattr(model, "__dict__") else None
    return found if isinstance(found, LoadingInfo) else None


__all__ = ["ATTRIBUTE", "LoadingInfo", "of", "remember", "split"]
