"""The architecture as a test, in room names.

``src/loadguard`` is a house of rooms: a package per capability (``_audit``, ``_scan``, ``cli``, ...) and three
modules at the root (``errors``, ``report``, ``compare``). A room is entered through its ``__init__`` (its face);
rooms point down the levels below and never sideways; a ``_name`` never crosses a module; an import sits at the top
of its module unless DEFERRED below says why not; and a status is spelled once, in ``report``. An import inside a
function is still a dependency: every rule here reads them too.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "loadguard"

# Bottom first. A room imports rooms of lower levels only; rooms on one level never import each other.
LEVELS: list[tuple[str, ...]] = [
    ("errors", "report"),  # the vocabulary: exceptions, results, statuses
    ("_infra",),  # text, paths, processes, forks, settings, caches, environments, import hooks, faces
    ("_files", "_codemod", "formats", "executors", "compare"),  # checkpoints and configs; code edits; outputs; pools
    ("workarounds",),  # the registry and the built-in workarounds
    ("_hf", "zoo"),  # how transformers loads (patches, replay, ties, poison); the test-model zoo
    ("_audit",),  # inventory, reference, checks, audit, repair, load
    ("runner", "_scan", "_matrix"),  # the capabilities built on the audit
    ("_fix",),  # the per-model change: planned from an audit, or from a scan when there are no weights
    ("cli", "pytest_plugin"),  # the front ends
    ("", "__main__"),  # the package's facade (lazy: each public name on first use) and `python -m loadguard`
]

# Edges that point up, each with the reason it must. Empty: the house has none.
DECLARED_UPWARD: dict[tuple[str, str], str] = {}

# Imports inside a function body. Third-party libraries that cost start-up (kept out of `import loadguard`,
# `loadguard --help` and the plugin that every pytest run in the environment loads: torch alone is ~1 s):
DEFERRED_LIBRARIES: dict[str, str] = {
    "torch": "~1.4 s to import (measured on the CI machine): never on `import loadguard`, `--help`, a usage error or a "
    "pytest run that does not ask for loadguard",
    "transformers": "imports torch (~0.7 s more)",
    "accelerate": "imports torch",
    "libcst": "~0.2 s: only `fix` and the source workarounds edit code",
    "numpy": "~0.1 s: only a few checks need it",
    "PIL": "zoo images only: `loadguard env` and the zoo's text models work without Pillow",
    "ray": "optional extra (loadguard[ray]): imported where it is used, its absence said there",
    "uv": "optional extra (loadguard[matrix]): without it, a uv on PATH",
    "ctypes": "Linux only (prctl), tried where it is used",
    "tomllib": "Python 3.11 on; 3.10 reads the tomli backport instead",
    "tomli": "tomllib's backport, on Python 3.10 only",
}
# Modules that defer imports of loadguard's own rooms or of the standard library, and why.
DEFERRED_MODULES: dict[str, str] = {
    "cli": "each command's module loads when the command runs, not on `loadguard --help`",
    "cli.*": "a command's body loads what it runs: `loadguard <command> --help` loads no torch",
    "pytest_plugin": "the plugin loads in every pytest run: what loads a model waits for a loadguard option",
    "pytest_plugin.*": "the plugin loads in every pytest run: what loads a model waits for a loadguard option",
    "formats": "a format's module loads when it is rendered",
    "executors": "an executor's module (Ray's) loads when it is chosen",
    "_scan.fleet": "loaded by `scan --help`: the scan itself loads when a fleet runs",
    "workarounds._source_fixes": "registered with every workaround (a usage error's path included): the code edits "
    "(_codemod: libcst, ~0.2 s) load when a source fix runs",
    "workarounds.remote_code": "registered with every workaround: the code edits (_codemod: libcst) load when one runs",
    "workarounds.v4_behaviour": "registered with every workaround: the code edits (_codemod: libcst) load when one runs",
    "workarounds.v4_runtime": "registered with every workaround: the code edits (_codemod: libcst) load when one runs",
    "workarounds.v4_config_cache": "registered with every workaround: the code edits (_codemod: libcst) load when one "
    "runs",
    "workarounds.v4_generate": "registered with every workaround: the code edits (_codemod: libcst) load when one "
    "runs",
    "workarounds.v4_star": "registered with every workaround: the code edits (_codemod: libcst) load when one runs",
    "workarounds.v4_standins": "its functions are written into model files as they are (a source fix): each imports "
    "what it needs inside, as the model's file will run it",
    "workarounds.v4_onnx": "registered with every workaround: transformers (and the code edits) load when it runs",
    "workarounds.transformers_v4": "registered with every workaround: the v4 mask helpers (torch) load when one runs",
    "workarounds.v4_names": "registered with every workaround: the v4 mask helpers (torch) load when one runs",
    "_fix.prove": "runs alone under transformers 4.57 (`python -m loadguard._fix.prove`): the workarounds it applies "
    "load only when asked",
}


STATUS_ENUMS = ("Status", "WorkaroundStatus", "FixStatus", "ChangeKind", "CellStatus")
# Values that are also ordinary words of the JSON documents (keys such as "ok", "error", "findings"), checked only
# where a status is compared
AMBIGUOUS_VALUES = {"ok", "error", "findings", "clean", "workaround"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _room(module: str) -> str:
    return module.split(".")[0]


def _level(room: str) -> int:
    for index, rooms in enumerate(LEVELS):
        if room in rooms:
            return index
    raise AssertionError(f"room {room!r} has no level: add it to LEVELS in {__file__}")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str  # the loadguard module named (the package of `from package import name`)
    names: tuple[str, ...]  # the names taken from it (empty for `import x`)

    def modules(self) -> set[str]:
        """The loadguard modules this import loads: ``target``, or the submodules it names."""
        known = _modules()
        named = {f"{self.target}.{n}".lstrip(".") for n in self.names} & set(known)
        return named | ({self.target} if len(named) < len(self.names) or not self.names else set())


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "templates" not in p.parts}


_TREES: dict[str, ast.Module] = {}


def _tree(module: str) -> ast.Module:
    if module not in _TREES:
        _TREES[module] = ast.parse(_modules()[module].read_text())
    return _TREES[module]


def _type_checking(tree: ast.Module) -> set[int]:
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }


def _target(node: ast.AST, module: str) -> str | None:
    """The loadguard module a ``from ... import`` names (None: not loadguard's)."""
    if not isinstance(node, ast.ImportFrom):
        return None
    if node.level:
        package = module.split(".") if _modules()[module].name == "__init__.py" else module.split(".")[:-1]
        base = package[: len(package) - node.level + 1]
        return ".".join([*base, *(node.module.split(".") if node.module else [])])
    if (node.module or "").split(".")[0] == "loadguard":
        return node.module[len("loadguard") :].lstrip(".")
    return None


def _imports(module: str) -> list[Import]:
    """Every import of a loadguard module in ``module``'s body, TYPE_CHECKING blocks aside."""
    tree = _tree(module)
    skip = _type_checking(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        target = _target(node, module)
        if target is not None:
            found.append(Import(module, node.lineno, target, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "loadguard":
                    found.append(Import(module, node.lineno, alias.name[len("loadguard") :].lstrip("."), ()))
    return found


@functools.cache
def _all_imports() -> list[Import]:
    return [i for module in _modules() for i in _imports(module)]


def _is_face_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("lazy_face", "_lazy_face")


def _face_parts(module: str) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]] | None:
    """A face's two literals, read from its ``lazy_face(...)`` call: module -> the names it offers, and the modules
    offered whole (None: no face, a public room's plain __init__)."""
    for statement in _tree(module).body:
        for node in ast.walk(statement):
            if _is_face_call(node):
                names = node.args[1]
                whole = next((k.value for k in node.keywords if k.arg == "modules"), ast.Tuple(elts=[]))
                return (
                    {k.value: tuple(e.value for e in v.elts) for k, v in zip(names.keys, names.values)},
                    tuple(e.value for e in whole.elts),
                )
    return None


def _face(room: str) -> set[str] | None:
    """What a private room offers (None: a public room's plain __init__)."""
    parts = _face_parts(room)
    return None if parts is None else {n for names in parts[0].values() for n in names} | set(parts[1])


def _bound_at_top(module: str) -> set[str]:
    names: set[str] = set()
    for node in _tree(module).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def test_every_module_is_in_a_room_with_a_level():
    rooms = {_room(m) for m in _modules()}
    assert {room: _level(room) for room in rooms}
    root_modules = sorted(m for m in _modules() if "." not in m and (m == "" or not (PACKAGE / m).is_dir()))
    assert root_modules == ["", "__main__", "compare", "errors", "report"], "a new module belongs in a room"


def test_rooms_point_down_the_levels():
    wrong = []
    for i in _all_imports():
        for target in i.modules():
            source, room = _room(i.module), _room(target)
            if source == room or (source, room) in DECLARED_UPWARD:
                continue
            if _level(room) >= _level(source):
                side = "beside" if _level(room) == _level(source) else "above"
                wrong.append(f"loadguard.{i.module}:{i.line} imports loadguard.{target}, a room {side} it")
    assert wrong == []


def test_declared_upward_edges_exist():
    edges = {(_room(i.module), _room(t)) for i in _all_imports() for t in i.modules()}
    assert [edge for edge in DECLARED_UPWARD if edge not in edges] == []


def test_a_room_is_entered_through_its_face():
    """From another room, a private room is imported whole or through the names its face offers; a public room
    through the public names its __init__ binds or a public module of it (``loadguard.formats.baseline``)."""
    wrong = []
    for i in _all_imports():
        for target in i.modules():
            room = _room(target)
            if room == _room(i.module) or room in ("", "errors", "report", "compare", "__main__"):
                continue
            if target == room and i.target != room:  # `from .. import _room`: the room whole
                continue
            offered = _face(room)
            if target != room:  # a module of the room, by name
                inside = target.split(".")[1:]
                if (offered is None and not any(p.startswith("_") for p in inside)) or (
                    offered is not None and len(inside) == 1 and inside[0] in offered and i.target == room
                ):
                    continue
                wrong.append(
                    f"loadguard.{i.module}:{i.line} imports loadguard.{target}: enter through loadguard.{room}"
                )
                continue
            if offered is None:
                offered = {n for n in _bound_at_top(room) if not n.startswith("_")}
            wrong += [
                f"loadguard.{i.module}:{i.line} takes {n} from loadguard.{room}, which does not offer it"
                for n in i.names
                if n not in offered and f"{room}.{n}" not in _modules()
            ]
    assert wrong == []


def test_a_face_offers_only_what_its_modules_define():
    """Each name a face offers is bound at the top of the module it names, or, where that module is a room with a
    face of its own (the package's facade names rooms), offered by that face."""
    missing = []
    for room in {_room(m) for m in _modules()}:
        for module, names in (_face_parts(room) or ({}, ()))[0].items():
            target = f"{room}.{module}".lstrip(".")
            offered = _face(target) if target == _room(target) and _face(target) is not None else _bound_at_top(target)
            missing += [f"loadguard.{target}.{n}" for n in names if n not in offered]
    assert missing == []


def test_no_private_name_crosses_a_module():
    """``from x import _name`` and ``module._name`` on an imported loadguard module, across any two modules."""
    wrong = []
    modules = _modules()
    for module in modules:
        for i in _imports(module):
            wrong += [
                f"loadguard.{module}:{i.line} takes {n} from loadguard.{i.target}"
                for n in i.names
                if n.startswith("_") and not n.startswith("__") and f"{i.target}.{n}".lstrip(".") not in modules
            ]
        imported = set()  # names bound to loadguard modules
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.Import):
                imported |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("loadguard")}
            elif (target := _target(node, module)) is not None:
                imported |= {a.asname or a.name for a in node.names if f"{target}.{a.name}".lstrip(".") in modules}
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                root = node.value
                while isinstance(root, ast.Attribute):  # `room.module._name` as well as `module._name`
                    root = root.value
                if isinstance(root, ast.Name) and root.id in imported:
                    wrong.append(f"loadguard.{module}:{node.lineno} reads {ast.unparse(node)}")
    assert wrong == []


def _matches(module: str, pattern: str) -> bool:
    return module == pattern or (pattern.endswith(".*") and module.startswith(pattern[:-1]))


def test_imports_sit_at_the_top_unless_deferred_says_why():
    wrong, used_libraries, used_modules = [], set(), set()
    for module in _modules():
        tree = _tree(module)
        skip = _type_checking(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if not isinstance(inner, (ast.Import, ast.ImportFrom)) or id(inner) in skip:
                        continue
                    if isinstance(inner, ast.ImportFrom):
                        top = "loadguard" if inner.level else (inner.module or "").split(".")[0]
                    else:
                        top = inner.names[0].name.split(".")[0]
                    if top in DEFERRED_LIBRARIES:
                        used_libraries.add(top)
                        continue
                    allowed = [p for p in DEFERRED_MODULES if _matches(module, p)]
                    if allowed:
                        used_modules.update(allowed)
                        continue
                    wrong.append(f"loadguard.{module}:{inner.lineno} {ast.unparse(inner)}")
    assert wrong == [], "move these to the module's top, or say why in DEFERRED_LIBRARIES / DEFERRED_MODULES"
    assert sorted(set(DEFERRED_LIBRARIES) - used_libraries) == []
    assert sorted(set(DEFERRED_MODULES) - used_modules) == []


def test_no_import_circles():
    graph: dict[str, set[str]] = {}
    for i in _all_imports():
        for target in i.modules():
            if i.module and target and target != i.module and not target.startswith(i.module + "."):
                graph.setdefault(i.module, set()).add(target)
    cycles, stack, state = [], [], {}

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def _status_values() -> dict[str, str]:
    values = {}
    for node in _tree("report").body:
        if isinstance(node, ast.ClassDef) and node.name in STATUS_ENUMS:
            for statement in node.body:
                if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
                    values.setdefault(statement.value.value, f"{node.name}.{statement.targets[0].id}")
    return values


def _not_statuses(tree: ast.Module) -> set[int]:
    """Strings that are names or prose, not statuses: docstrings, ``__all__``, a face's names, a model config's keys."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            skip |= {id(n) for n in ast.walk(node)}
        if _is_face_call(node):
            skip |= {id(n) for n in ast.walk(node)}
        if isinstance(node, ast.keyword) and node.arg == "config" and isinstance(node.value, ast.Dict):
            skip |= {id(k) for k in node.value.keys if k is not None}
    return skip


def test_statuses_are_spelled_once():
    """Outside ``report``, a status is its enum member: a string equal to one is flagged anywhere, and a word that is
    also a JSON key ("ok", "error", "findings", "clean", "workaround") wherever it is compared with a status."""
    values = _status_values()
    assert {"uninitialized", "fixed", "recompute", "stale", "unavailable"} <= set(values)
    wrong = []
    for module in _modules():
        if module == "report":
            continue
        tree = _tree(module)
        skip = _not_statuses(tree)
        compared = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and "status" in ast.unparse(node):
                for side in [node.left, *node.comparators]:
                    compared |= {id(n) for n in ast.walk(side)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values):
                continue
            if id(node) in skip or (node.value in AMBIGUOUS_VALUES and id(node) not in compared):
                continue
            wrong.append(f"loadguard.{module}:{node.lineno} {node.value!r}: use {values[node.value]}")
    assert wrong == []


def test_no_module_over_15000_characters():
    """A module stays small: at most 15,000 characters not counting whitespace (what the 350 lines allowed before
    the formatter wrapped them at 119 columns; counted without whitespace, so the layout does not move it)."""
    sizes = {name: len(re.sub(r"\s", "", path.read_text())) for name, path in _modules().items()}
    assert {name: n for name, n in sizes.items() if n > 15_000} == {}
