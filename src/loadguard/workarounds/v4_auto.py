"""``v4-removed-auto-classes``: an ``auto_map`` naming only auto classes transformers 5 removed (from the API diff:
``AutoModelForVision2Seq``, ``AutoModelWithLMHead``), loaded through the class the entry names."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._registry import Usage, workaround
from ._source_fixes import renamed_auto_map
from .remote_code import has_remote_code

V4_AUTO_CLASSES = {
    "AutoModelForVision2Seq": "AutoModelForImageTextToText",
    "AutoModelWithLMHead": "AutoModelForCausalLM",
}


@workaround(
    "v4-removed-auto-classes",
    applies_to=has_remote_code,
    stage="before_import",
    reason="an auto_map naming only auto classes transformers 5 removed (AutoModelForVision2Seq, AutoModelWithLMHead): "
    "loaded through the class the entry names, with the auto class 5.x replaced it by",
    upstream="the model's repository (name AutoModelForImageTextToText / AutoModelForCausalLM in auto_map)",
    fixes=[
        ("ModelConfigError", r"auto_map names only auto classes this transformers removed"),
        ("ImportError", r"cannot import name '(AutoModelForVision2Seq|AutoModelWithLMHead)' from 'transformers'"),
        ("AttributeError", r"has no attribute '(AutoModelForVision2Seq|AutoModelWithLMHead)'"),
    ],
    native=lambda: all(hasattr(__import__("transformers"), name) for name in V4_AUTO_CLASSES),
    touches=r'"('
    + "|".join(V4_AUTO_CLASSES)
    + r')"\s*:',  # an auto_map entry of config.json (part of what model_code reads)
    source_fix=lambda sources, config, model: renamed_auto_map(sources, V4_AUTO_CLASSES),
)
@contextlib.contextmanager
def removed_auto_classes(path, config: dict) -> Iterator[Usage]:
    import transformers
    import transformers.models.auto as auto_module

    usage = Usage()
    given = []
    for name, replacement in V4_AUTO_CLASSES.items():
        if name not in vars(transformers) and not hasattr(transformers, name):
            base = getattr(transformers, replacement)
            doc = f"{name}, removed in transformers 5: {replacement} under its old name"
            shim = type(name, (base,), {"__doc__": doc, "__module__": base.__module__})
            for module in (transformers, auto_module):  # the second: register_for_auto_class validates the name there
                setattr(module, name, shim)
            given.append(name)
    named = [name for name in given if name in (config.get("auto_map") or {})]
    usage.count = len(named)
    try:
        yield usage
    finally:
        for name in given:
            for module in (transformers, auto_module):
                delattr(module, name)
    if named:
        usage.detail = f"loaded through the auto_map's {', '.join(named)} entry ({', '.join(V4_AUTO_CLASSES[n] for n in named)} under its 4.x name)"


__all__ = ["V4_AUTO_CLASSES"]
