"""Workarounds that let older remote code import and construct on current torch / transformers."""

from __future__ import annotations

import ast
import contextlib
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

from ._registry import Usage, workaround

TYPING_ALIASES = (
    "Any",
    "Callable",
    "Dict",
    "FrozenSet",
    "Iterable",
    "Iterator",
    "List",
    "Mapping",
    "Optional",
    "Sequence",
    "Set",
    "Tuple",
    "Type",
    "Union",
)


def has_remote_code(config: dict) -> bool:
    """any model with remote code (an auto_map in its config)"""
    return bool(config.get("auto_map"))


# a textual test that any `from torch.nn.functional import *` passes (line continuations too): a file that fails it
# has no such import, and needs no parse
_STAR_IMPORT = re.compile(r"from[\s\\]+torch[\s\\]*\.[\s\\]*nn[\s\\]*\.[\s\\]*functional[\s\\]+import[\s\\(]*\*")


def _leaked_names(source: str) -> set[str]:
    """Typing names a module uses without defining or importing them, while star-importing
    torch.nn.functional (through which older torch leaked them)."""
    if not _STAR_IMPORT.search(source):
        return set()  # no such star import: the file is not parsed (every remote-code load asks, for every file)
    tree = ast.parse(source)
    star = any(
        isinstance(n, ast.ImportFrom) and n.module == "torch.nn.functional" and any(a.name == "*" for a in n.names)
        for n in ast.walk(tree)
    )
    if not star:
        return set()
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return (used & set(TYPING_ALIASES)) - defined


def _leaked_names_or_none(source: str) -> set[str]:
    try:
        return _leaked_names(source)
    except (SyntaxError, ValueError):
        return set()


def _python(sources: dict[str, str]) -> dict[str, str]:
    return {name: text for name, text in sources.items() if name.endswith(".py")}


def typing_imports(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], str]:
    """The source fix of ``remote-code-typing-aliases``: each file imports the typing names it uses."""
    from .._codemod import ensure_imports

    changed = {
        name: ensure_imports(text, [f"from typing import {', '.join(sorted(leaked))}"])
        for name, text in _python(sources).items()
        if (leaked := _leaked_names_or_none(text))
    }
    return (
        changed,
        "imports the typing names (List, Optional, ...) it used without importing: current torch no longer leaks them through `from torch.nn.functional import *`",
    )


@workaround(
    "remote-code-typing-aliases",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that uses List/Dict/Optional/... leaked from `from torch.nn.functional import *`, "
    "which current torch no longer leaks (NameError on import)",
    upstream="vllm#51432",
    fixes=[("NameError", r"name '(" + "|".join(TYPING_ALIASES) + r")' is not defined")],
    native=lambda: all(hasattr(__import__("torch.nn.functional", fromlist=["*"]), name) for name in TYPING_ALIASES),
    touches=lambda sources: any(_leaked_names_or_none(source) for source in sources),
    source_fix=typing_imports,
)
@contextlib.contextmanager
def typing_aliases(path, config: dict) -> Iterator[Usage]:
    import torch.nn.functional as functional

    needed: set[str] = set()
    folder = Path(path) if path is not None else None
    for file in sorted(folder.glob("*.py")) if folder is not None and folder.is_dir() else []:
        try:
            needed |= _leaked_names(file.read_text())
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
    added = [name for name in sorted(needed) if not hasattr(functional, name)]
    usage = Usage(len(added), f"gave torch.nn.functional {', '.join(added)} during the import" if added else "")
    for name in added:
        setattr(functional, name, getattr(typing, name))
    try:
        yield usage
    finally:
        for name in added:
            delattr(functional, name)


class _TiedKeysShim:
    """Stands in for ``all_tied_weights_keys`` on models whose code never called ``post_init()``."""

    def __init__(self, usage: Usage):
        self.usage = usage

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if "all_tied_weights_keys" not in obj.__dict__:
            self.usage.count += 1
            obj.__dict__["all_tied_weights_keys"] = obj.get_expanded_tied_weights_keys(all_submodels=False)
        return obj.__dict__["all_tied_weights_keys"]

    def __set__(self, obj, value):
        obj.__dict__["all_tied_weights_keys"] = value


def _v4_tied_weights(source: str) -> bool:
    """Code written for 4.x's tying: ``_tied_weights_keys`` as a list, or a model class that never calls ``post_init()``."""

    if re.search(r"_tied_weights_keys\s*(:[^=]*)?=\s*[\[(]", source):
        return True
    return "PreTrainedModel" in source and "post_init(" not in source


def _class_sources(sources: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{class name: (file, its file's source)}`` for every top-level class of the model's files."""
    import libcst

    out = {}
    for name, text in _python(sources).items():
        for node in libcst.parse_module(text).body:
            if isinstance(node, libcst.ClassDef):
                out.setdefault(node.name.value, (name, text))
    return out


def _needs_post_init(cls: type, classes: dict[str, tuple[str, str]]) -> str | None:
    """The model class whose ``__init__`` (the one that runs for ``cls``) should end with ``self.post_init()``: None when
    one that runs already calls it."""
    from .._codemod import method_calls

    first = None
    for klass in cls.__mro__:
        if klass.__name__ not in classes:
            break
        calls = method_calls(classes[klass.__name__][1], klass.__name__, "__init__")
        if calls is None:
            continue
        first = first or klass.__name__
        if "self.post_init" in calls:
            return None
        if "super().__init__" not in calls:
            break
    return first


def _runs_before_own_init(cls: type, target: str, classes: dict[str, tuple[str, str]]) -> bool:
    """Whether ``cls`` has an ``__init__`` of its own (not ``target``'s) that runs ``target.__init__`` through
    ``super().__init__``, so that a line appended to ``target.__init__`` runs before the rest of ``cls``'s."""
    from .._codemod import method_calls

    own = None
    for klass in cls.__mro__:
        if klass.__name__ not in classes:
            return False
        calls = method_calls(classes[klass.__name__][1], klass.__name__, "__init__")
        if calls is None:
            continue
        if klass.__name__ == target:
            return own is not None
        own = own or klass.__name__
        if "super().__init__" not in calls and not any(c.endswith(f"{target}.__init__") for c in calls):
            return False
    return False


TIE_DEFAULT_ON_5 = (
    'if not hasattr(self, "tie_word_embeddings"):  # transformers 4 configs defaulted it to True; 5 has no default\n'
    "    self.tie_word_embeddings = True"
)
"""What a config class of the model's own gets when its model's v4 tie list becomes a mapping and its config.json does
not say ``tie_word_embeddings`` (4.x saved only what differed from its default, True): without the attribute,
transformers 5 ties nothing. On 4.x the attribute is always there, and the line does nothing."""

POST_INIT_ON_5 = (
    'if int(transformers.__version__.split(".")[0]) >= 5:  # transformers 5 needs post_init()\n    self.post_init()'
)
"""What an ``__init__`` that never calls ``post_init()`` gets: the call where transformers 5 runs, nothing on 4.x, so
transformers 4 runs exactly the code it loaded before (a new ``post_init()`` there would initialize and tie at
construction, which this code never did on 4.x)."""


def tied_weights_source(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], dict[str, str]]:
    """The source fix of ``v4-tied-weights-keys``: a v4 ``_tied_weights_keys`` list becomes transformers 5's mapping
    ``{tied key: the input embeddings' weight}`` (iterating it gives 4.x the same keys), and a model class whose
    ``__init__`` never calls ``post_init()`` calls it last, where transformers 5 runs (:data:`POST_INIT_ON_5`). What it
    did is said per file it changed."""

    from transformers import PreTrainedModel

    from .._codemod import (
        Refused,
        append_to_init,
        class_assignments,
        ensure_imports,
        preferred_quote,
        set_class_attribute,
        string_literal,
    )

    changed = dict(_python(sources))
    done: list[tuple[str, str]] = []  # (file, what was done there)
    left = []
    mapped: dict[
        tuple[str, str], list[str]
    ] = {}  # what the tied keys map to -> the classes whose list became that mapping
    for name, text in list(changed.items()):
        for cls, value in class_assignments(text, "_tied_weights_keys").items():
            if not value.lstrip().startswith(("[", "(")):
                continue
            instance = next(
                (
                    m
                    for m in model.modules()
                    if type(m).__name__ == cls or any(k.__name__ == cls for k in type(m).__mro__)
                ),
                None,
            )
            if instance is None:  # this class alone is left for a person; the others are fixed
                left.append(
                    f"{cls}._tied_weights_keys in {name} is a transformers 4 list and no {cls} is in the loaded model "
                    f"to say what it ties to: write it as transformers 5's mapping {{tied key: the weight it ties to}}"
                )
                continue
            embeddings = instance.get_input_embeddings()
            source = next(n for n, m in instance.named_modules() if m is embeddings) + ".weight"
            quote = preferred_quote(text)
            mapping = (
                "{"
                + ", ".join(
                    f"{string_literal(key, quote)}: {string_literal(source, quote)}" for key in ast.literal_eval(value)
                )
                + "}"
            )
            changed[name] = text = set_class_attribute(text, cls, "_tied_weights_keys", mapping)
            mapped.setdefault((name, source), []).append(cls)
    for (name, source), classes in mapped.items():  # one sentence per target, however many classes tie to it
        done.append((name, f"{', '.join(classes)}: _tied_weights_keys maps to {source}"))
    if mapped and "tie_word_embeddings" not in config:
        changed, said = _tie_default(changed, model)
        done += said
    classes = _class_sources(changed)
    models = _model_classes(model, PreTrainedModel)
    for cls in sorted(models, key=lambda k: k.__name__):
        target = _needs_post_init(cls, classes)
        if target is None:
            continue
        early = sorted({o.__name__ for o in models if o is not cls and _runs_before_own_init(o, target, classes)})
        if early:  # a post_init() there would run before their own modules are built
            if not any(issubclass(o, cls) for o in models if o.__name__ in early):
                left.append(
                    f"{cls.__name__} inherits {target}.__init__, which {', '.join(early)} run through super() before "
                    f"building their own modules: a post_init() there would run before those exist; give "
                    f"{cls.__name__} an __init__ that calls super().__init__(config) and then self.post_init()"
                )
            continue  # a base class (XPreTrainedModel): the classes built from it end their own __init__
        file = classes[target][0]
        changed[file] = ensure_imports(append_to_init(changed[file], target, POST_INIT_ON_5), ["import transformers"])
        classes = _class_sources(changed)
        done.append((file, f"{target}.__init__ ends with self.post_init() where transformers 5 runs"))
    edited = {n: t for n, t in changed.items() if t != sources[n]}
    said = {
        file: "; ".join(what for where, what in done if where == file) + " (written for transformers 4.x's tying)"
        for file in edited
    }
    if left:
        raise Refused("; ".join(left), edited, said)
    return edited, said


def _tie_default(changed: dict[str, str], model) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The model's own config class (its files define it, and this transformers gave it no ``tie_word_embeddings``)
    ends its ``__init__`` with :data:`TIE_DEFAULT_ON_5`."""
    from transformers import PretrainedConfig

    from .._codemod import append_to_init

    config = getattr(model, "config", None)
    if config is None or hasattr(
        PretrainedConfig(), "tie_word_embeddings"
    ):  # this transformers gives every config one
        return changed, []
    name = type(config).__name__
    file = _class_sources(changed).get(name, (None, None))[0]
    if file is None or "tie_word_embeddings" in changed[file]:  # not the model's own, or it says it itself
        return changed, []
    changed = {**changed, file: append_to_init(changed[file], name, TIE_DEFAULT_ON_5)}
    return changed, [
        (file, f"{name}.__init__ keeps transformers 4's tie_word_embeddings=True where config.json does not say")
    ]


def _model_classes(model, base: type) -> set[type]:
    """The model classes of the folder: those in the loaded model, and every other ``base`` subclass its code defines
    beside them (a class no load built is one a user builds: its ``__init__`` needs ``post_init()`` on transformers 5
    too). Read from the namespaces of the loaded classes' own functions: transformers may have dropped the modules."""
    found = {type(m) for m in model.modules() if isinstance(m, base)}
    namespaces = []
    for cls in list(found):
        if not cls.__module__.startswith("transformers_modules"):
            continue
        function = next((v for v in vars(cls).values() if hasattr(v, "__globals__")), None)
        if function is not None:
            namespaces.append(function.__globals__)
        elif cls.__module__ in sys.modules:
            namespaces.append(vars(sys.modules[cls.__module__]))
    for namespace in namespaces:
        for value in list(namespace.values()):
            if (
                isinstance(value, type)
                and issubclass(value, base)
                and value.__module__.startswith("transformers_modules")
            ):
                found.add(value)
    return found


@workaround(
    "v4-tied-weights-keys",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code written for transformers 4.x: _tied_weights_keys as a list, or no post_init() call "
    "('... object has no attribute all_tied_weights_keys')",
    upstream="transformers#46620",
    fixes=[
        ("AttributeError", r"has no attribute 'all_tied_weights_keys'"),
        ("AttributeError", r"^'list' object has no attribute 'keys'$"),
    ],
    native=lambda: not hasattr(__import__("transformers").PreTrainedModel, "get_expanded_tied_weights_keys"),  # 4.x
    touches=lambda sources: any(_v4_tied_weights(source) for source in sources),
    source_fix=tied_weights_source,
)
@contextlib.contextmanager
def v4_tied_weights_keys(path, config: dict) -> Iterator[Usage]:
    from transformers import PreTrainedModel

    usage = Usage()
    if not hasattr(PreTrainedModel, "get_expanded_tied_weights_keys"):  # transformers 4.x: nothing to bridge
        yield usage
        return
    original = PreTrainedModel.get_expanded_tied_weights_keys

    def expanded(self, all_submodels: bool = False):
        keys = getattr(self, "_tied_weights_keys", None) if not all_submodels else None
        if isinstance(keys, (list, tuple)):  # v4 style: tied to the input embeddings
            usage.count += 1
            embeddings = self.get_input_embeddings()
            source = next(n for n, m in self.named_modules() if m is embeddings) + ".weight"
            if not getattr(self.config, "tie_word_embeddings", True):  # absent: 4.x's default, True
                return {}
            return {key: source for key in keys}
        return original(self, all_submodels=all_submodels)

    had = "all_tied_weights_keys" in PreTrainedModel.__dict__
    PreTrainedModel.get_expanded_tied_weights_keys = expanded
    if not had:
        PreTrainedModel.all_tied_weights_keys = _TiedKeysShim(usage)
    try:
        yield usage
    finally:
        PreTrainedModel.get_expanded_tied_weights_keys = original
        if not had:
            del PreTrainedModel.all_tied_weights_keys
    usage.detail = "bridged _tied_weights_keys / all_tied_weights_keys for code written for transformers 4.x"
