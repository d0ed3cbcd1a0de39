"""What a weightless load of a scan constructs: the model class an auto class would pick, a model's own
``from_pretrained`` override run around the weightless base load, and the state dict "every key" means."""

from __future__ import annotations

import torch

from .. import _hf
from .._audit import default_dtype
from .._hf import loading_info, meta_writes_skipped
from .._hf import ties as tie_module
from ..errors import ModelConfigError, ScanError
from . import source as _scan_source


def concrete_class(auto_class, config, source: _scan_source.Source, trust_remote_code: bool):
    """The model class ``auto_class.from_pretrained`` would instantiate for ``config``."""
    name = getattr(auto_class, "__name__", "")
    if not (name.startswith("Auto") and getattr(auto_class, "__module__", "").startswith("transformers.")):
        return auto_class
    class_ref = (getattr(config, "auto_map", None) or {}).get(name)
    if class_ref is not None and trust_remote_code:
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        model_class = get_class_from_dynamic_module(class_ref, str(source.folder))
        # as the auto class does: from it, transformers tells remote code (is_remote_code(), 5.3-5.12 skip
        # _init_weights on fully loaded modules of remote code only), and a prediction must see the same
        try:
            model_class.register_for_auto_class(auto_class=auto_class)
        except (
            ValueError
        ):  # an auto class transformers itself no longer has (given back by a workaround): mark it alike
            model_class._auto_class = name
        return model_class
    try:
        return auto_class._model_mapping[type(config)]
    except KeyError:
        raise ModelConfigError(
            f"{name} has no model class for {type(config).__name__} ({source.name})",
            "pass the class with --auto-class (model_class=), e.g. AutoModel or the architecture's class",
        ) from None


def own_loader(cls) -> type | None:
    """The class of the model's own code that overrides ``from_pretrained``, if any."""
    for klass in cls.__mro__:
        if (klass.__module__ or "").startswith("transformers."):
            return None
        if "from_pretrained" in vars(klass):
            return klass
    return None


def through_own_loader(cls, load):
    """``load()``, a ``from_pretrained`` of ``cls``. Where the model's code overrides it (to adjust the generation
    config or a sub-module after ``super().from_pretrained(...)``), the override runs, and the weightless load happens
    in the ``PreTrainedModel.from_pretrained`` it delegates to; an override that never reaches it loads its own
    weights, which a weightless load cannot predict: refused, saying so."""

    klass = own_loader(cls)
    if klass is None:
        return load()
    refusal = (
        f"cannot scan {cls.__name__}: the model's class loads its own weights ({klass.__name__}.from_pretrained never "
        "calls PreTrainedModel.from_pretrained"
    )
    hint = "audit a full load instead (loadguard audit PATH); fix it with its weights on disk"
    with _hf.through_the_base(_hf.BaseCall(weightless=True)) as base:
        try:
            result = load()
        except Exception as error:  # an own loader that reads its weights itself fails on a folder without them
            if base.reached:
                raise
            raise ScanError(f"{refusal}; it failed reading them: {type(error).__name__}: {error})", hint) from error
    if not base.reached:
        raise ScanError(f"{refusal})", hint)
    model, _ = loading_info.split(result)
    return model if isinstance(model, torch.nn.Module) else base.model


def own_keys(cls, config, dtype, saved: bool = False) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The model's own state dict, built on meta: what "the checkpoint holds every key" means. ``saved``: the keys a
    ``save_pretrained`` of this code writes instead: its declared ties' targets dropped (4.x and 5.x both save so)."""

    wanted = dtype if isinstance(dtype, torch.dtype) else config_dtype(config)
    with torch.device("meta"), default_dtype(wanted), meta_writes_skipped():
        model = cls(config)
    state = tie_module.saved_state_dict(model) if saved else model.state_dict()
    return {key: (tuple(value.shape), value.dtype) for key, value in state.items()}


def config_dtype(config) -> torch.dtype | None:
    # a 4.x config keeps torch_dtype as an attribute; 5.x makes it a property that warns it is deprecated
    value = getattr(config, "dtype", None) or vars(config).get("torch_dtype")
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype):
        return getattr(torch, value)
    return None


__all__ = ["concrete_class", "config_dtype", "own_keys", "own_loader", "through_own_loader"]
