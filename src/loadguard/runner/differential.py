"""The eager twin of a model: constructed normally on CPU, then the checkpoint's tensors copied in.

No meta device, no ``empty_like``: every buffer is what ``__init__`` computed. Comparing a model as
``from_pretrained`` leaves it with this twin is the experiment that found MiniCPM-V 2.6's broken
``pos_embed``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .. import _files, _hf
from .. import workarounds as registry
from .._files import Checkpoint, map_keys
from ..errors import CheckpointError


def eager_load(
    path: str | os.PathLike,
    *,
    auto_cls: Any = None,
    trust_remote_code: bool = False,
    dtype: Any = "auto",
    workarounds: Any = (),
) -> torch.nn.Module:
    """Build the model from its config eagerly (real tensors, ``__init__`` runs as written), then copy in
    every checkpoint tensor that maps onto it. Raises if a checkpoint tensor cannot be placed one to one.
    ``workarounds``: the ``before_import`` workarounds its code needs (or ``"auto"``), as for ``loadguard.load``.

    Example::

        twin = eager_load(path, trust_remote_code=True, workarounds="auto")
    """
    from transformers import AutoConfig

    config_dict = _files.read_config(path, trust_remote_code)
    cls = _hf.resolve_class(auto_cls, config_dict)
    parsed = _hf.parse_dtype(dtype)

    def build(active: tuple[str, ...]):
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
            if hasattr(cls, "from_config"):
                return config, (
                    cls.from_config(config, trust_remote_code=trust_remote_code)
                    if cls.__name__.startswith("Auto")
                    else cls._from_config(config)
                )
            return config, cls(config)
        except Exception as error:
            raise _hf.translate(error, path, active) from error

    (config, model), outcomes = registry.attempt(build, workarounds, path, {"_name_or_path": str(path), **config_dict})
    registry.remember(model, outcomes)
    if parsed not in (None, "auto"):
        model = model.to(parsed)
    elif getattr(config, "dtype", None) is not None and isinstance(config.dtype, torch.dtype):
        model = model.to(config.dtype)
    names = list(model.state_dict())
    with Checkpoint.open(path) as checkpoint:
        key_map = map_keys(model, checkpoint, names)
        if key_map.fused:
            raise CheckpointError(
                f"{len(key_map.fused)} tensors of {path} are fused by transformers on load (e.g. {next(iter(key_map.fused))}); "
                "the eager twin cannot place them one to one",
                "compare with a checkpoint saved by this transformers version",
            )
        state = model.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, key in key_map.to_checkpoint.items():
                target = state[name]
                target.copy_(checkpoint.get(key).to(target.dtype))
    model.eval()
    model.loadguard_unloaded = sorted(set(names) - set(key_map.to_checkpoint))
    return model
