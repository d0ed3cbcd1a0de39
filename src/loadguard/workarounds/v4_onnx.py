"""``v4-onnx-module``: ``transformers.onnx``, gone in transformers 5 (ONNX export moved to optimum), imported by the
configuration files of 2022-23 remote code (CodeGen2, GPT-J copies: ``from transformers.onnx import OnnxConfigWithPast,
PatchingSpec``) for an export config class the model never uses while it loads or runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Iterator

from ._registry import Usage, workaround
from .remote_code import has_remote_code

NAMES = ("OnnxConfig", "OnnxConfigWithPast", "OnnxSeq2SeqConfigWithPast", "PatchingSpec", "FeaturesManager")

STAND_IN = '''class {name}:
    """transformers 4's transformers.onnx.{name}: ONNX export moved out of transformers 5 (optimum); only an export uses it."""

    def __init__(self, *args, **kwargs):
        raise ImportError("transformers.onnx was removed in transformers 5: export to ONNX with optimum")'''


def _present() -> bool:
    try:
        return importlib.util.find_spec("transformers.onnx") is not None
    except (ImportError, ValueError):
        return False


def onnx_source_fix(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], str]:
    """Each name a file imports from ``transformers.onnx`` becomes a ``try`` import with a stand-in class that refuses
    to be used (the same import on transformers 4, where the module exists)."""
    from ._source_fixes import fallback_import

    edited, names = dict(sources), set()
    for file in [f for f in sources if f.endswith(".py")]:
        for name in NAMES:
            if f"{name}" in edited[file] and "transformers.onnx" in edited[file]:
                changed, _ = fallback_import(
                    {file: edited[file]}, name, ("transformers.onnx",), STAND_IN.format(name=name)
                )
                if changed:
                    edited.update(changed)
                    names.add(name)
    return {f: t for f, t in edited.items() if t != sources[f]}, (
        f"imports {', '.join(sorted(names))} from transformers.onnx where it exists (transformers 4), else a stand-in "
        "that only an ONNX export would call"
    )


@workaround(
    "v4-onnx-module",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code whose configuration file imports transformers.onnx (OnnxConfigWithPast, PatchingSpec: an "
    "export config class), which transformers 5 removed (ONNX export moved to optimum): the module is given back "
    "with stand-in classes while the model loads; only an ONNX export would use them",
    upstream="the model's repository (drop the ONNX config class, or import it under try)",
    fixes=[("ModuleNotFoundError", r"No module named 'transformers\.onnx'")],
    native=_present,
    touches=r"from\s+transformers\.onnx\s+import|import\s+transformers\.onnx",
    source_fix=onnx_source_fix,
)
@contextlib.contextmanager
def onnx_module(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    if _present():
        yield usage
        return
    import transformers

    class Onnx(types.ModuleType):
        def __getattribute__(self, name):
            if name in NAMES:  # the model's code took a name from it: it needed the module
                usage.count += 1
                usage.detail = (
                    "gave the model's code transformers.onnx (stand-in export classes), as transformers 4 had it"
                )
            return super().__getattribute__(name)

    module = Onnx("transformers.onnx", "transformers 4's transformers.onnx, given back by loadguard")
    for name in NAMES:
        namespace: dict = {}
        exec(STAND_IN.format(name=name), namespace)  # our own constant text: a class that refuses to be used
        vars(module)[name] = namespace[name]
    previous = sys.modules.get("transformers.onnx")
    sys.modules["transformers.onnx"] = module
    try:
        yield usage
    finally:
        if previous is None:
            sys.modules.pop("transformers.onnx", None)
        else:
            sys.modules["transformers.onnx"] = previous
        if getattr(transformers, "onnx", None) is module:
            delattr(transformers, "onnx")


__all__ = ["NAMES", "onnx_module", "onnx_source_fix"]
