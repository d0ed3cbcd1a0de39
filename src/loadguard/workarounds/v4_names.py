"""``v4-module-names``: every module-level name transformers 4.57 had and 5.x removed, served back to code written
for 4.x, derived from the API diff (``workarounds/data/api_diff.json``, made by ``make api-diff``), not from the
failures we happened to see.

For a name the running transformers lacks, in the module 4.57 had it in, the workaround gives (in this order):

1. its own stand-in with 4.57's meaning, where the name's home is gone too (``find_pruneable_heads_and_indices``,
   ``prune_linear_layer``, ``is_*_available`` ...: :data:`OWN`);
2. the same object from where 4.57's lived, where that still exists (``Optional`` re-exported by a model module,
   ``BaseModelOutputWithPast``, ``ACT2FN``, ``logger``'s kind ...), or 4.57's value for a constant;
3. by pattern: ``<X>FlashAttention2`` / ``<X>SdpaAttention`` -> the module's ``<X>Attention`` (which picks its kernel
   from ``config._attn_implementation``), ``*_ATTENTION_CLASSES`` -> every kernel mapped to that class, and at the top
   level a vision ``<X>FeatureExtractor`` -> ``<X>ImageProcessor``.

The diff holds 4.57's names and those of 4.x releases before it that 5.x lacks too (``"last_in"``: code written for
4.36 imports ``_expand_mask`` or ``LlamaFlashAttention2``, which 4.57 had already dropped).

What none of these can give back is declined with the reason in :data:`loadguard.workarounds.api_coverage.NAMES_DECLINED`
(``tests/workarounds/test_api_diff.py`` requires every entry of the diff served or declined). Names other workarounds own are left to them.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

from .._infra import AfterImport
from ._registry import Usage, workaround
from .remote_code import has_remote_code
from .v4_standins import OLDER, OLDER_BLOOM, OWN, VANISHED, definition_named, stand_in_source

OWNED_ELSEWHERE = {
    "is_torch_fx_available",
    "AutoModelForVision2Seq",
    "AutoModelWithLMHead",
    "LlamaFlashAttention2",
    "LlamaSdpaAttention",
}  # v4-torch-fx-available, v4-removed-auto-classes, v4-llama-attention-classes
_ATTENTION_VARIANT = re.compile(
    r"^(?P<prefix>[A-Z]\w*?)(FlashAttention2|SdpaAttention|FlashAttention|SdpaSelfAttention)$"
)


@functools.cache
def diff() -> dict:
    """The checked-in API diff (4.57 -> the pinned 5.x)."""
    return json.loads(resources.files("loadguard.workarounds").joinpath("data/api_diff.json").read_text())


@functools.cache
def removed() -> dict[str, dict[str, str | None]]:
    """{module: {name: where 4.57's object lived}} for every module-level name the diff lists as gone."""
    out: dict[str, dict[str, str | None]] = {module: dict(names) for module, names in VANISHED.items()}
    for entry in diff()["entries"]:
        if entry["id"].startswith("name:"):
            _, module, name = entry["id"].split(":", 2)
            if name not in OWNED_ELSEWHERE:
                out.setdefault(module, {})[name] = entry.get("origin")
    return out


# -------------------------------------------------------------------------------------------------------------
# stand-ins for names whose home 5.x removed too: availability probes here, functions in v4_standins


def _availability(name: str) -> Callable[[], Any] | None:
    """``is_<package>_available`` / ``_<package>_available`` / ``_<package>_version`` as 4.x computed them: whether the
    package imports here, its installed version."""
    match = re.match(r"^_?(?:is_)?(?P<package>[a-z0-9_]+?)_(?P<what>available|version)$", name)
    if match is None:
        return None
    package, what = match["package"], match["what"]

    def installed() -> bool:
        try:
            return importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):
            return False

    if what == "version":

        def version() -> str:
            try:
                return importlib.metadata.version(package.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:
                return "N/A"

        return version
    if name.startswith("_"):
        return installed
    return lambda: lambda *args, **kwargs: installed()


_MODELING = re.compile(r"^transformers\.models\.(\w+)\.modeling_\w+$")


def provider(module: str, name: str, origin: str | None) -> Callable[[], Any] | None:
    """How to give back ``module.name`` on the running transformers, or None when nothing can."""
    native_model = _MODELING.match(module)
    if native_model is not None and name in OLDER:
        older = OLDER_BLOOM if native_model.group(1) == "bloom" else OLDER
        return lambda: older[name]
    if name in OWN:
        return OWN[name]
    if origin is not None and origin.startswith("value:"):
        value = json.loads(origin[len("value:") :])
        return lambda: value
    if origin is not None and _resolves(origin):
        return lambda: _resolve(origin)
    renamed = _top_level_rename(module, name)
    if renamed is not None:
        return lambda: getattr(importlib.import_module("transformers"), renamed)
    variant = _ATTENTION_VARIANT.match(name)
    if variant is not None:
        target = f"{variant['prefix']}Attention"
        return (lambda: getattr(importlib.import_module(module), target)) if target in _names(module) else None
    if name.endswith("_ATTENTION_CLASSES"):
        classes = [
            n for n in _names(module) if n.endswith(("SelfAttention", "Attention")) and not _ATTENTION_VARIANT.match(n)
        ]
        if classes:
            chosen = sorted(classes, key=lambda n: (not n.endswith("SelfAttention"), len(n)))[0]
            return lambda: dict.fromkeys(
                ("eager", "sdpa", "flash_attention_2"), getattr(importlib.import_module(module), chosen)
            )
        return None
    if name == "logger":
        return lambda: importlib.import_module("transformers.utils.logging").get_logger(module)
    return _availability(name)


def _top_level_rename(module: str, name: str) -> str | None:
    """What transformers 5 calls a top-level class 4.x had under a name 5.x dropped: a vision ``<X>FeatureExtractor``
    (4.x's deprecated subclass of ``<X>ImageProcessor``, adding nothing) is ``<X>ImageProcessor`` (None: not one, or
    5.x has no such class). 5.x itself still resolves ``<X>TokenizerFast`` and ``<X>ImageProcessorFast``."""
    if module != "transformers" or not name.endswith("FeatureExtractor"):
        return None
    target = name[: -len("FeatureExtractor")] + "ImageProcessor"
    return target if target in _top_level_names() else None


@functools.cache
def _top_level_names() -> frozenset[str]:
    try:
        return frozenset(dir(importlib.import_module("transformers")))
    except Exception:
        return frozenset()


def _resolve(origin: str):
    module, _, qualname = origin.partition(":")
    value: Any = importlib.import_module(module)
    for part in qualname.split(".") if qualname else ():
        value = getattr(value, part)
    return value


@functools.cache
def _resolves(origin: str) -> bool:
    try:
        _resolve(origin)
    except Exception:
        return False
    return True


def _names(module: str) -> list[str]:
    try:
        return list(vars(importlib.import_module(module)))
    except Exception:
        return []


class _Patcher:
    """Gives each module of the diff a ``__getattr__`` serving its removed names, now or when it is first imported."""

    def __init__(self, usage: Usage, used: set[str]):
        self.usage, self.used, self.patched = usage, used, {}

    def patch(self, module) -> None:
        module = sys.modules.get(module.__name__, module)  # a package that put a lazy module in its own place
        gone = dict(removed().get(module.__name__, {}))
        if _MODELING.match(module.__name__):  # the older helpers, in every native model module
            gone.update({name: None for name in OLDER if name not in vars(module)})
        if not gone or module.__name__ in self.patched:
            return
        previous = module.__dict__.get("__getattr__")
        usage, used = self.usage, self.used

        def __getattr__(name: str):
            if name in gone and name not in module.__dict__:
                make = provider(module.__name__, name, gone[name])
                if make is not None:
                    usage.count += 1
                    used.add(f"{module.__name__}.{name}")
                    return make()
            if previous is not None:
                return previous(name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__
        objects = module.__dict__.get("_objects")
        if "__getattr__" in vars(type(module)) and isinstance(objects, dict):
            # transformers' own lazy module asks its class's __getattr__, which never reaches a module-level one: its
            # table of extra objects serves the removed names there
            module._objects = _Served(objects, gone, module.__name__, usage, used)
        self.patched[module.__name__] = (module, previous, objects)

    def undo(self) -> None:
        for module, previous, objects in self.patched.values():
            if previous is None:
                module.__dict__.pop("__getattr__", None)
            else:
                module.__getattr__ = previous
            if isinstance(module.__dict__.get("_objects"), _Served):
                module._objects = objects


class _Served(dict):
    """A lazy module's table of objects, with the removed names served as they are asked for (and counted)."""

    def __init__(self, objects: dict, gone: dict, module: str, usage: Usage, used: set[str]):
        super().__init__(objects)
        self.gone, self.module, self.usage, self.used = gone, module, usage, used

    def _make(self, name: str):
        if name in self.gone and not dict.__contains__(self, name):
            return provider(self.module, name, self.gone[name])
        return None

    def __contains__(self, name) -> bool:
        return dict.__contains__(self, name) or self._make(name) is not None

    def __getitem__(self, name):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        make = self._make(name)
        if make is None:
            raise KeyError(name)
        self.usage.count += 1
        self.used.add(f"{self.module}.{name}")
        return make()


class _Vanished(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A module 4.x had that 5.x removed whole (:data:`VANISHED`): an empty module whose removed names the patcher
    serves, where no real finder has one."""

    def __init__(self, patcher: _Patcher):
        self.patcher = patcher

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in VANISHED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module) -> None:
        self.patcher.patch(module)


def _imports_a_removed_name(source: str) -> bool:
    """Whether ``source`` imports, from a transformers module, a name the diff lists as gone from that module."""

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    gone = removed()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("transformers"):
            if any(alias.name in gone.get(node.module, {}) for alias in node.names):
                return True
    return False


def _removed_names_pattern() -> str:
    names = sorted({name for gone in removed().values() for name in gone} | set(OLDER))
    return (
        r"(cannot import name '("
        + "|".join(map(re.escape, names))
        + r")' from 'transformers|module 'transformers[\w.]*' has no attribute '("
        + "|".join(map(re.escape, names))
        + r")')"
    )


def fallback(module: str, name: str, origin: str | None, bound: str | None = None) -> str | None:
    """What a model file can say instead of ``from <module> import <name>`` where transformers 5 removed the name: the
    same meaning as :func:`provider` gives back at load time, as source defining ``bound`` (the name the file imports
    it as; default ``name``). None: nothing can, by hand."""
    bound = bound or name
    native_model = _MODELING.match(module)
    if native_model is not None and name in OLDER:
        older = OLDER_BLOOM if native_model.group(1) == "bloom" else OLDER
        return definition_named(older[name], bound)
    if name in OWN:
        return stand_in_source(name, bound)
    if origin is not None and origin.startswith("value:"):
        return f"{bound} = {json.loads(origin[len('value:') :])!r}"
    if origin is not None and _resolves(origin):
        home, _, qualname = origin.partition(":")
        first, _, rest = qualname.partition(".")
        if not rest:
            return f"from {home} import {first} as {bound}"
        return f"from {home} import {first}\n\n{bound} = {qualname}"
    renamed = _top_level_rename(module, name)
    if renamed is not None:
        return f"from transformers import {renamed} as {bound}"
    variant = _ATTENTION_VARIANT.match(name)
    if variant is not None and f"{variant['prefix']}Attention" in _names(module):
        return f"from {module} import {variant['prefix']}Attention as {bound}"
    if name == "logger":
        return f"from transformers.utils import logging\n\n{bound} = logging.get_logger({module!r})"
    match = re.match(r"^is_(?P<package>[a-z0-9_]+?)_available$", name)
    if match is not None:
        return (
            f"def {bound}(*args, **kwargs):\n    import importlib.util\n\n"
            f"    return importlib.util.find_spec({match['package']!r}) is not None"
        )
    return None


def _removed_imports(text: str) -> list[tuple[str, str, str | None, str]]:
    """``(module, name, origin, bound)`` of each name ``text`` imports from a transformers module that 5.x removed it
    from; ``bound``: the name the import binds (its ``as`` name, else the name)."""
    gone = removed()
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("transformers"):
            here = dict(gone.get(node.module, {}))
            if _MODELING.match(node.module):
                here.update({n: None for n in OLDER if n not in here})
            found += [
                (node.module, alias.name, here[alias.name], alias.asname or alias.name)
                for alias in node.names
                if alias.name in here
            ]
    return found


def module_names_source_fix(sources: dict[str, str], config: dict, model: Any) -> tuple[dict[str, str], str]:
    """Each removed name a model file imports becomes a ``try`` import with a fallback that means what 4.x's name did
    (its 5.x home, 4.x's definition, 4.57's value): on transformers 4 the import works and nothing changes. A name with
    no fallback is refused, naming the file and the name."""
    from .._codemod import Refused
    from ._source_fixes import fallback_import

    edited = dict(sources)
    names = []
    for file in [f for f in sources if f.endswith(".py")]:
        for module, name, origin, bound in _removed_imports(sources[file]):
            if name in OWNED_ELSEWHERE:
                continue
            text = fallback(module, name, origin, bound)
            if text is None:
                raise Refused(
                    f"{file} imports {name} from {module}, which transformers 5 removed and which has no stand-in: "
                    "import it from its new home or copy its 4.x definition by hand"
                )
            changed, _ = fallback_import({file: edited[file]}, name, (module,), text, bound)
            edited.update(changed)
            names.append(bound)
    changed = {f: t for f, t in edited.items() if t != sources[f]}
    listed = sorted(set(names))
    return changed, (
        f"imports {', '.join(listed)} where transformers has {'it' if len(listed) == 1 else 'them'}, else defines "
        f"{'it' if len(listed) == 1 else 'each'} as transformers 4 did"
    )


@workaround(
    "v4-module-names",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that imports a name transformers 4.57 had and 5.x removed (the API diff: re-exports such as "
    "Optional or BaseModelOutputWithPast from a model module, find_pruneable_heads_and_indices, is_*_available, "
    "<X>SdpaAttention ...): given back from its 5.x home, as 4.57's stand-in, or 4.57's value",
    upstream="the model's repository (import from the name's current home)",
    fixes=[
        ("ImportError", _removed_names_pattern()),
        ("AttributeError", _removed_names_pattern()),
        ("ModuleNotFoundError", "No module named '(" + "|".join(map(re.escape, VANISHED)) + ")'"),
    ],
    native=lambda: int(importlib.import_module("transformers").__version__.split(".")[0]) < 5,
    touches=lambda sources: any(_imports_a_removed_name(source) for source in sources),
    source_fix=module_names_source_fix,
)
@contextlib.contextmanager
def module_names(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    used: set[str] = set()
    patcher = _Patcher(usage, used)

    def wanted(name: str) -> bool:
        return name in removed() or _MODELING.match(name) is not None

    for name in list(sys.modules):
        if wanted(name):
            patcher.patch(sys.modules[name])
    hook = AfterImport(wanted, patcher.patch).install()
    vanished = _Vanished(patcher)
    sys.meta_path.append(vanished)  # after every real finder: a release that still has the module serves it
    try:
        yield usage
    finally:
        sys.meta_path.remove(vanished)
        for name in VANISHED:
            if getattr(sys.modules.get(name), "__loader__", None) is vanished:
                del sys.modules[name]
        hook.remove()
        patcher.undo()
    if used:
        usage.detail = (
            f"gave back {', '.join(sorted(used)[:6])}"
            + (f" and {len(used) - 6} more" if len(used) > 6 else "")
            + " (removed in transformers 5)"
        )


__all__ = ["OWN", "diff", "module_names", "provider", "removed"]
