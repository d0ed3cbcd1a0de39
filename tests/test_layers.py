"""The architecture as a test: imports point down the layers only, and no module imports itself back, however
lazily (an import inside a function is still a dependency)."""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "loadguard"

# Bottom first. A module may import from its own layer or any layer below; patterns are module names under loadguard.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "_text", "_leftover", "_sizes", "_procs", "_preflight", "_codemod", "_codemod_parts", "_codemod_write", "_fix_prove", "_settings", "_cache", "_paths", "_noise", "_locations", "_origins", "_observers", "_forks", "executors", "executors.*", "_import_hooks", "_config", "statuses", "workarounds", "workarounds._registry", "workarounds._external", "workarounds.v4_api", "workarounds._source_fixes", "workarounds.v4_auto", "workarounds.v4_names", "workarounds.v4_behaviour", "workarounds.api_coverage",
     "workarounds.minicpmv", "workarounds.remote_code", "workarounds.transformers_v4", "workarounds._attn_mask_v4"),
    ("inventory", "report", "loading_info", "poison", "_pages", "zoo", "zoo.*"),
    ("reference", "_where", "checkpoint", "_bin_header", "keymap", "offload", "checks", "_equality", "ties", "_hf", "_hub", "_transformers", "_replay", "_writes", "_fixplan", "_fix_files", "_upstream"),
    ("audit",),
    ("repair",),
    ("workarounds._apply",),
    ("load", "selfcheck", "scan", "_scan_source", "_warm", "native", "compare", "render", "reproducer"),
    ("runner", "runner.*", "matrix", "matrix_native", "matrix_diff", "envs", "formats", "formats.*", "fleet", "fix"),
    ("cli", "cli.*", "pytest_plugin", "pytest_plugin.*", "_cells", "__main__", ""),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "templates" not in p.parts}


def _layer(module: str) -> int:
    for index, patterns in enumerate(LAYERS):
        if any(fnmatch(module, pattern) for pattern in patterns):
            return index
    raise AssertionError(f"loadguard.{module} has no layer: add it to LAYERS in {__file__}")


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The loadguard modules ``module`` imports anywhere in its body (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text())
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if node.level > 1 else package
                prefix = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                prefix = node.module or ""
                if not (prefix == "loadguard" or prefix.startswith("loadguard.")):
                    continue
                prefix = prefix[len("loadguard"):].lstrip(".")
            candidates = [f"{prefix}.{alias.name}".lstrip(".") for alias in node.names]
            names = [c if c in known else prefix for c in candidates]
            found |= {n for n in names if n in known}
            continue
        else:
            continue
        for name in names:
            if name == "loadguard" or name.startswith("loadguard."):
                short = name[len("loadguard"):].lstrip(".")
                while short not in known and "." in short:
                    short = short.rsplit(".", 1)[0]
                if short in known:
                    found.add(short)
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_layer():
    for module in _modules():
        _layer(module)


def test_imports_point_down_the_layers():
    upward = [
        f"loadguard.{module} (layer {_layer(module)}) imports loadguard.{target} (layer {_layer(target)})"
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _layer(target) > _layer(module) and not target.startswith(module + ".") and module != ""
    ]
    assert upward == []


def test_no_import_circles():
    graph = _graph()
    graph.pop("", None)  # the package facade imports lazily whatever it exports: it is the top, nothing imports it back
    for targets in graph.values():
        targets.discard("")
    cycles, stack, state = [], [], {}

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def test_no_module_over_350_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > 350}
    assert long == {}
