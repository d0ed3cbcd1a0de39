"""``v4-star-imports``: ``from transformers.models.bart.modeling_bart import *`` brought every public name of the module
on transformers 4 releases whose modeling modules had no ``__all__`` (``BartConfig``, ``BertEmbeddings``, what the module
itself imported); transformers 5's modules declare ``__all__``, and code that used such a name fails with ``NameError``
where it is defined. While active, a star import of a native modeling or configuration module brings them again; its
source fix imports the names a file uses by name, next to its star import (on 4.x the same objects)."""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
import sys
import traceback
from collections.abc import Iterator

from .._infra import AfterImport
from ._registry import Signature, Usage, model_code, workaround
from .remote_code import has_remote_code

NATIVE = re.compile(r"^transformers\.models\.\w+\.(modeling|configuration)_\w+$")
_STAR = re.compile(r"^\s*from\s+(transformers\.models\.\w+\.(?:modeling|configuration)_\w+)\s+import\s+\*", re.M)


def _star_modules(source: str) -> list[str]:
    return _STAR.findall(source)


def _lost(module) -> list[str]:
    """The public names of ``module`` its ``__all__`` leaves out (what a star import of it no longer brings)."""
    declared = set(getattr(module, "__all__", ()) or ())
    if not declared:
        return []
    return [name for name in vars(module) if not name.startswith("_") and name not in declared]


def _a_lost_name(error: BaseException) -> bool:
    """The ``NameError`` is for a name a star import in the failing file no longer brings."""
    name = getattr(error, "name", None)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "transformers_modules" in f.filename]
    if not name or not frames:
        return False
    try:
        with open(frames[-1].filename, encoding="utf-8") as handle:
            source = handle.read()
    except OSError:
        return False
    for module_name in _star_modules(source):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if name in _lost(module):
            return True
    return False


def _imports_of(module, module_name: str, wanted: list[str]) -> list[str]:
    """The import statements that bind ``wanted`` as the star import of ``module`` did on 4.x: a module it had
    imported (``nn``, ``math``) from where it lives, the rest from ``module_name``."""
    modules = [n for n in wanted if isinstance(vars(module)[n], type(sys))]
    lines = [
        f"import {vars(module)[n].__name__}\n"
        if vars(module)[n].__name__ == n
        else f"import {vars(module)[n].__name__} as {n}\n"
        for n in modules
    ]
    objects = [n for n in wanted if n not in modules]
    return lines + ([f"from {module_name} import {', '.join(objects)}\n"] if objects else [])


def star_imports_source_fix(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], str]:
    """Each file's star import of a native module gets, after it, an import of the names the file uses that the star
    import no longer brings (``from transformers.models.bart.modeling_bart import BartConfig``)."""
    import libcst as cst

    from .._codemod import bound_names

    edited, named = {}, []
    for file, text in sources.items():
        if not file.endswith(".py") or not _star_modules(text):
            continue
        used = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        used -= bound_names(text)  # what the file imports or defines itself is its own
        tree = cst.parse_module(text)
        body = list(tree.body)
        for index in range(len(body) - 1, -1, -1):
            statement = body[index]
            if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(statement.body[0], cst.ImportFrom):
                continue
            node = statement.body[0]
            if not isinstance(node.names, cst.ImportStar) or node.module is None:
                continue
            module_name = cst.Module(body=[]).code_for_node(node.module)
            if not NATIVE.match(module_name):
                continue
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            wanted = sorted(set(_lost(module)) & used)
            for extra in reversed(_imports_of(module, module_name, wanted)):
                body.insert(index + 1, cst.parse_statement(extra))
            named += wanted
        if named:
            edited[file] = tree.with_changes(body=body).code
    return edited, (
        f"imports {', '.join(sorted(set(named)))} by name: transformers 5's modules declare __all__, and a star "
        "import no longer brings them"
    )


@workaround(
    "v4-star-imports",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that star-imports a native transformers module and uses a name its __all__ leaves out "
    "(BartConfig from modeling_bart, BertEmbeddings): transformers 5 declares __all__, 4.x modules had none; a star "
    "import of them brings every public name again",
    upstream="the model's repository (import the names it uses by name)",
    fixes=[Signature("NameError", r"^name '\w+' is not defined", when=_a_lost_name)],
    native=lambda: not any(_lost(m) for name, m in list(sys.modules.items()) if NATIVE.match(name) and m is not None),
    touches=lambda sources: any(_star_modules(source) for source in sources),
    source_fix=star_imports_source_fix,
)
@contextlib.contextmanager
def star_imports(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    widened: dict[str, tuple] = {}
    wanted_modules = {m for source in model_code(path) for m in _star_modules(source)}

    def widen(module) -> None:
        if module.__name__ not in wanted_modules or module.__name__ in widened:
            return
        lost = _lost(module)
        if lost:
            widened[module.__name__] = (module, module.__all__)
            module.__all__ = [*module.__all__, *lost]
            usage.count += 1

    for name in wanted_modules:
        if name in sys.modules:
            widen(sys.modules[name])
    hook = AfterImport(lambda name: name in wanted_modules, widen).install()
    try:
        yield usage
    finally:
        hook.remove()
        for module, declared in widened.values():
            module.__all__ = declared
    if widened:
        usage.detail = f"star imports of {', '.join(sorted(widened))} bring every public name, as on 4.x"


__all__ = ["NATIVE", "star_imports", "star_imports_source_fix"]
