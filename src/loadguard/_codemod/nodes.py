"""Small readers of libcst nodes shared by :mod:`loadguard._codemod` and :mod:`loadguard._codemod.write`."""

from __future__ import annotations

import keyword

import libcst as cst


def attribute_code(owner: str, name: str) -> str:
    """``owner.name`` as code, where ``name`` comes from the model (torch takes any string as a buffer's name): an
    attribute access only for a plain identifier, else ``getattr(owner, "name")``; the name is never code."""
    if name.isidentifier() and not keyword.iskeyword(name) and name.isascii():
        return f"{owner}.{name}"
    return f"getattr({owner}, {name!r})"


def assignment_code(owner: str, name: str, value: str) -> str:
    """``owner.name = value`` as code, the name as data as in :func:`attribute_code`."""
    target = attribute_code(owner, name)
    return f"{target} = {value}" if not target.startswith("getattr(") else f"setattr({owner}, {name!r}, {value})"


def class_named(module: cst.Module, name: str) -> cst.ClassDef | None:
    return next((n for n in module.body if isinstance(n, cst.ClassDef) and n.name.value == name), None)


def method_named(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return next((n for n in body if isinstance(n, cst.FunctionDef) and n.name.value == name), None)


def assigns(cls: cst.ClassDef, name: str) -> bool:
    """Whether the class body binds ``name`` by an assignment (``_init_weights = lambda self, m: ...``), not a ``def``."""
    return any(
        isinstance(target, cst.Name) and target.value == name
        for line in getattr(cls.body, "body", ())
        if isinstance(line, cst.SimpleStatementLine)
        for statement in line.body
        for target in assigned_targets(statement)
    )


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()


def walk_statements(block: cst.BaseSuite):
    for statement in getattr(block, "body", ()):
        if isinstance(statement, cst.SimpleStatementLine):
            yield statement
        elif isinstance(statement, cst.BaseCompoundStatement):
            yield from walk_statements(statement.body)
            orelse = getattr(statement, "orelse", None)
            if orelse is not None:
                yield from walk_statements(orelse.body if isinstance(orelse, (cst.Else, cst.If)) else orelse)


def assigned_targets(small: cst.CSTNode) -> list[cst.BaseExpression]:
    """What an assignment (``a = b = ...``, ``a: T = ...``, ``a += ...``) writes; nothing for any other statement."""
    if isinstance(small, cst.Assign):
        return [t.target for t in small.targets]
    if isinstance(small, (cst.AnnAssign, cst.AugAssign)):
        return [small.target]
    return []


def target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in target_names(element.value)]
    return [target.value] if isinstance(target, cst.Name) else []


def at_top_level(function: cst.FunctionDef, statement: cst.CSTNode) -> bool:
    return any(s is statement for s in function.body.body)


def nested_under(function: cst.FunctionDef, statement: cst.CSTNode, kinds: tuple[type, ...]) -> bool:
    """Whether ``statement`` lies under a compound statement of ``kinds`` in ``function``."""

    def search(block, under: bool) -> bool | None:
        for node in getattr(block, "body", ()):
            if node is statement:
                return under
            if isinstance(node, cst.BaseCompoundStatement):
                here = under or isinstance(node, kinds)
                for part in (node.body, getattr(getattr(node, "orelse", None), "body", None)):
                    if part is not None and (found := search(part, here)) is not None:
                        return found
        return None

    return bool(search(function.body, False))


def parameters_of(function: cst.FunctionDef) -> list[str]:
    return [
        p.name.value
        for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    ]


def indented(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else line for line in text.splitlines())


_RANDOM = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "randperm",
        "rand_like",
        "randn_like",
        "normal",
        "normal_",
        "uniform_",
        "bernoulli",
        "multinomial",
    }
)


def draws_random(node: cst.CSTNode) -> bool:
    found = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, call):
            name = code_of(call.func)
            found.append(name.split(".")[-1] in _RANDOM or ".random." in f".{name}")

    node.visit(Calls())
    return any(found)


def module_names(module: cst.Module) -> dict[str, cst.CSTNode]:
    """Names the file binds at module level, with the statement that binds them (imports, defs, classes, assignments)."""
    bound: dict[str, cst.CSTNode] = {}
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            bound[statement.name.value] = statement
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        bound[(alias.evaluated_alias or alias.evaluated_name).split(".")[0]] = statement
                elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        bound[alias.evaluated_alias or alias.evaluated_name] = statement
                elif isinstance(small, (cst.Assign, cst.AnnAssign)):
                    targets = assigned_targets(small)
                    for target in targets:
                        if isinstance(target, cst.Name):
                            bound[target.value] = statement
        elif isinstance(statement, (cst.If, cst.Try)):  # try: import x / except ImportError: ...
            for name, node in module_names(cst.Module(body=list(statement.body.body))).items():
                bound.setdefault(name, statement)
    return bound


def after_docstring(body: list[cst.BaseStatement]) -> int:
    first = body[0] if body else None
    if (
        isinstance(first, cst.SimpleStatementLine)
        and first.body
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    ):
        return 1
    return 0


def bound_names(source: str) -> set[str]:
    return set(module_names(cst.parse_module(source)))


def import_of(source: str, name: str, module_stem: str) -> str | None:
    """The import statement that gives another file of the same folder ``name`` as ``source`` (a file named
    ``module_stem``) has it: the same import line where ``source`` imports it, a relative import where it defines it."""
    statement = module_names(cst.parse_module(source)).get(name)
    if statement is None:
        return None
    if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], (cst.Import, cst.ImportFrom)):
        small = statement.body[0]
        aliases = (
            [a for a in small.names if (a.evaluated_alias or a.evaluated_name).split(".")[0] == name]
            if not isinstance(small.names, cst.ImportStar)
            else []
        )
        alias = aliases[0]
        text = alias.evaluated_name + (f" as {alias.evaluated_alias}" if alias.evaluated_alias else "")
        if isinstance(small, cst.Import):
            return f"import {text}"
        dots = "." * len(small.relative)
        return f"from {dots}{code_of(small.module) if small.module else ''} import {text}"
    return f"from .{module_stem} import {name}"


def parse_error(source: str) -> str | None:
    """Why ``source`` is not Python libcst can edit (its first line), or None when it parses."""
    try:
        cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        return f"line {error.raw_line}: {str(error).splitlines()[0]}"
    except Exception as error:  # libcst rejects some inputs outside its syntax errors (an encoding declaration)
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None
