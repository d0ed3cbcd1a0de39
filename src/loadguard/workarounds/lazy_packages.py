"""``remote-code-lazy-imports``: a package the model's code imports only inside a function (Qwen-1's
``transformers_stream_generator``, imported in ``chat_stream``) that is installed but no longer imports on this
transformers (it wants names transformers 5 removed). transformers' import check of remote code imports every package
a file names, wherever it sits, and stops the load; the model itself would only meet the failure when that function
runs. Its source fix puts each such import under ``try`` (which the check skips), changing nothing else.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path

from ._registry import Usage, workaround
from .remote_code import has_remote_code


def lazy_packages(source: str) -> set[str]:
    """Top-level packages ``source`` imports only inside function bodies, outside any ``try``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    eager, lazy = set(), set()

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Try):
            return  # transformers' check skips imports under try
        if isinstance(node, ast.Import):
            for alias in node.names:
                (lazy if in_function else eager).add(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            (lazy if in_function else eager).add(node.module.split(".")[0])
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return lazy - eager


def broken(package: str) -> str | None:
    """Why ``package`` is installed and still does not import here (None: it imports, or it is not installed)."""
    try:
        importlib.import_module(package)
    except ModuleNotFoundError as error:
        return None if error.name == package else f"{type(error).__name__}: {error}"
    except ImportError as error:
        return f"{type(error).__name__}: {error}"
    return None


def guard_lazy_imports(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], str]:
    """Each function-level import of a package that is installed and does not import here goes under
    ``try: ... except ImportError: raise``: the same behaviour where it runs, and no longer checked at load."""
    import libcst as cst

    changed, packages = {}, set()
    for name, text in sources.items():
        wanted = {p for p in lazy_packages(text) if broken(p)} if name.endswith(".py") else set()
        if not wanted:
            continue

        class Guard(cst.CSTTransformer):
            def __init__(self):
                super().__init__()
                self.depth = 0

            def visit_FunctionDef(self, node):
                self.depth += 1

            def leave_FunctionDef(self, original, updated):
                self.depth -= 1
                return updated

            def leave_SimpleStatementLine(self, original, updated):
                small = updated.body[0] if len(updated.body) == 1 else None
                module = (
                    cst.Module(body=[]).code_for_node(small.module)
                    if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative
                    else small.names[0].evaluated_name
                    if isinstance(small, cst.Import)
                    else ""
                )
                if self.depth == 0 or module.split(".")[0] not in wanted:
                    return updated
                packages.add(module.split(".")[0])
                line = cst.Module(body=[]).code_for_node(updated.with_changes(leading_lines=[])).strip()
                block = cst.parse_statement(
                    f"try:  # transformers checks the imports of remote code at load; it skips those under try\n"
                    f"    {line}\nexcept ImportError:\n    raise\n"
                )
                return block.with_changes(leading_lines=updated.leading_lines)

        new = cst.parse_module(text).visit(Guard()).code
        if new != text:
            changed[name] = new
    return changed, (
        f"imports {', '.join(sorted(packages))} under try where a function needs it (transformers' load-time import "
        "check skips it; where the function runs, the import behaves as before)"
    )


@workaround(
    "remote-code-lazy-imports",
    applies_to=has_remote_code,
    stage="before_import",
    reason="a package the model's code imports only inside a function (transformers_stream_generator in Qwen-1's "
    "chat_stream) is installed but does not import on this transformers (it wants names 5.x removed): transformers' "
    "import check of remote code imports it anyway and stops the load; the check skips it, the function meets the "
    "failure if it runs",
    upstream="the model's repository (import it under try, or where it is used only)",
    fixes=[("ImportError", r"^cannot import name '\w+' from '(transformers|torch)[\w.]*'", "check_imports")],
    native=lambda: False,
    touches=lambda sources: any(lazy_packages(source) for source in sources),
    source_fix=guard_lazy_imports,
)
@contextlib.contextmanager
def lazy_imports(path, config: dict) -> Iterator[Usage]:
    from transformers import dynamic_module_utils

    usage = Usage()
    original = dynamic_module_utils.get_imports
    skipped: set[str] = set()

    def get_imports(filename):
        try:
            lazy = lazy_packages(Path(filename).read_text(encoding="utf-8"))
        except OSError:
            lazy = set()
        imports = original(filename)
        left = [package for package in imports if not (package in lazy and broken(package))]
        skipped.update(set(imports) - set(left))
        usage.count = len(skipped)
        return left

    dynamic_module_utils.get_imports = get_imports
    try:
        yield usage
    finally:
        dynamic_module_utils.get_imports = original
    if skipped:
        usage.detail = (
            f"did not import {', '.join(sorted(skipped))} at load (installed, broken here, needed only inside a "
            "function of the model's code)"
        )


__all__ = ["broken", "guard_lazy_imports", "lazy_imports", "lazy_packages"]
