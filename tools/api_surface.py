"""Dump what code written for transformers 4 can touch, as the installed transformers has it (JSON on stdout).

    python tools/api_surface.py [--modules all|core] > surface.json

Surfaces: ``config`` (every attribute a plain ``PretrainedConfig()`` carries, with its value), ``model`` (the
class-level names of ``PreTrainedModel``, ``GenerationMixin`` and the cache classes ``Cache`` and ``DynamicCache``,
with each method's parameters), ``modules``
(module-level names, each with where its object lives, of ``transformers`` and the modules remote code imports from
(:data:`CORE_MODULES`: ``modeling_utils``, ``pytorch_utils``, ``activations``, ``cache_utils``, ``onnx`` ...) and, with ``--modules all``, every
``transformers.models.*.modeling_*`` module; a module that does not exist is recorded as absent), ``auto`` (the auto
classes), ``stars`` (what a star import of each module brings).  ``tools/api_diff.py`` compares two dumps.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import pkgutil
import re
import sys
import warnings
from pathlib import Path

CORE_MODULES = (
    "transformers",
    "transformers.utils",
    "transformers.utils.import_utils",
    "transformers.modeling_utils",
    "transformers.pytorch_utils",
    "transformers.modeling_attn_mask_utils",
    "transformers.configuration_utils",
    "transformers.generation.utils",
    "transformers.onnx",
    "transformers.activations",
    "transformers.modeling_outputs",
    "transformers.modeling_rope_utils",
    "transformers.modeling_flash_attention_utils",
    "transformers.cache_utils",
    "transformers.file_utils",
    "transformers.utils.generic",
    "transformers.generation",
    "transformers.tokenization_utils",
    "transformers.tokenization_utils_base",
    "transformers.tokenization_utils_fast",
    "transformers.integrations",
    "transformers.deepspeed",
)


CACHE_CLASSES = ("Cache", "DynamicCache")


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return f"<{type(value).__name__}>"


def _parameters(member) -> list[str] | None:
    function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    if not callable(function):
        return None
    try:
        # a default that is a function prints its address: not part of the API, and different on every run
        return [re.sub(r" at 0x[0-9a-f]+>", ">", str(p)) for p in inspect.signature(function).parameters.values()]
    except (TypeError, ValueError):
        return None


def _class_names(cls) -> dict:
    names = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("transformers"):
            for name, member in vars(klass).items():
                if name.startswith("__") and name.endswith("__"):
                    continue
                names[name] = (
                    {"parameters": _parameters(member)}
                    if _parameters(member) is not None
                    else {"value": _jsonable(member) if not isinstance(member, property) else "<property>"}
                )
    return names


def _origin(value) -> str | None:
    """Where a module-level name's object lives (``module:qualname``, ``module`` for a module), when it says."""
    import types
    import typing

    if isinstance(value, types.ModuleType):
        return value.__name__
    typing_name = getattr(value, "_name", None)
    if isinstance(typing_name, str) and getattr(typing, typing_name, None) is value:
        return f"typing:{typing_name}"
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if (
        isinstance(module, str)
        and isinstance(qualname, str)
        and "<" not in qualname
        and _resolves_to(f"{module}:{qualname}", value)
    ):
        return f"{module}:{qualname}"
    return None


def _resolves_to(origin: str, value) -> bool:
    """Whether ``origin`` names ``value`` itself (a subscripted ``Union[...]`` says ``typing:Union``, a bound method
    its class's function: neither is the object)."""
    module, _, qualname = origin.partition(":")
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return False
    return found is value


def _module_names(name: str) -> dict[str, str | None] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
    except Exception:
        return None
    names = {n: _origin(v) for n, v in sorted(vars(module).items()) if not (n.startswith("__") and n.endswith("__"))}
    names.update((n, origin) for n, origin in _lazy_names(module).items() if n not in names)
    return dict(sorted(names.items()))


def _star_names(name: str) -> list[str]:
    """What ``from <name> import *`` brings: ``__all__`` where the module declares it, else every name of it not
    starting with ``_`` (a 4.x modeling module without ``__all__`` brought its config, layers, ``nn``, ``torch``)."""
    module = sys.modules[name]
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return sorted(str(n) for n in declared)
    return sorted(n for n in vars(module) if not n.startswith("_"))


def _lazy_names(module) -> dict[str, str | None]:
    """The names a lazy module (transformers' ``_LazyModule``) gives on first access and ``vars()`` does not hold yet,
    each with the submodule it would import it from, read from the module's own tables (nothing is imported: many
    would fail, TensorFlow and Flax classes among them)."""
    lazy = getattr(module, "_class_to_module", None)
    if not isinstance(lazy, dict):
        return {}
    names = {name: f"{module.__name__}.{sub}:{name}" for name, sub in lazy.items()}
    names.update((sub, f"{module.__name__}.{sub}") for sub in getattr(module, "_modules", ()) if "." not in sub)
    try:  # and what it resolves past those tables (5.x's aliases: LlamaTokenizerFast is LlamaTokenizer), origin unsaid
        names.update((name, None) for name in dir(module) if name not in names and not name.startswith("__"))
    except Exception:
        pass
    return names


def main() -> None:
    real, sys.stdout = (
        sys.stdout,
        sys.stderr,
    )  # transformers' own modules print while importing: keep them off the JSON
    try:
        surface = collect()
    finally:
        sys.stdout = real
    json.dump(surface, sys.stdout, indent=1, sort_keys=True)


def _cache_classes() -> dict:
    """The cache classes generate-time code calls (``DynamicCache.from_legacy_cache``, ``cache.get_usable_length``):
    their class-level names, where this release has them (``transformers.cache_utils`` came in 4.36)."""
    try:
        from transformers import cache_utils
    except Exception:
        return {}
    return {name: _class_names(getattr(cache_utils, name)) for name in CACHE_CLASSES if hasattr(cache_utils, name)}


def collect() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", choices=["core", "all"], default="core")
    arguments = parser.parse_args()
    import transformers
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel

    config = PretrainedConfig()
    surface = {
        "transformers": transformers.__version__,
        "config": {k: _jsonable(v) for k, v in sorted(vars(config).items()) if not k.startswith("__")},
        "model": {
            "PreTrainedModel": _class_names(PreTrainedModel),
            "GenerationMixin": _class_names(GenerationMixin),
            **_cache_classes(),
        },
        "modules": {},
        "auto": sorted(n for n in dir(transformers) if n.startswith("AutoModel")),
    }
    names = list(CORE_MODULES)
    if arguments.modules == "all":
        import transformers.models as models

        for info in pkgutil.iter_modules(models.__path__):
            package = f"transformers.models.{info.name}"
            folder = Path(models.__path__[0]) / info.name  # find_spec fails on a lazy package of older 4.x
            for sub in pkgutil.iter_modules([str(folder)] if info.ispkg else []):
                if sub.name.startswith("modeling_") and not sub.name.startswith(("modeling_tf_", "modeling_flax_")):
                    names.append(f"{package}.{sub.name}")
    for name in names:
        surface["modules"][name] = _module_names(name)
    surface["stars"] = {name: _star_names(name) for name in names if surface["modules"][name] is not None}
    # an object with no __module__ (a dict such as ACT2FN, a constant): where it is defined, found by identity
    homes: dict[int, str] = {}
    for module_name, module in sorted(sys.modules.items()):
        if module_name.startswith("transformers") and module is not None:
            for attribute, value in list(vars(module).items()):
                if not isinstance(value, (int, float, str, bool, type(None))) and id(value) not in homes:
                    homes[id(value)] = f"{module_name}:{attribute}"
    for module_name, names_ in surface["modules"].items():
        if not names_:
            continue
        module = sys.modules.get(module_name)
        for attribute, origin in names_.items():
            if origin is None and module is not None:
                value = vars(module).get(attribute)
                home = homes.get(id(value))
                if home is not None and home != f"{module_name}:{attribute}":
                    names_[attribute] = home
                elif isinstance(value, (bool, int, str)) or value is None:  # a constant: its value is what 4.x gave
                    names_[attribute] = "value:" + json.dumps(value)
    return surface


if __name__ == "__main__":
    main()
