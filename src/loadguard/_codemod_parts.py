"""Small readers of libcst nodes shared by :mod:`loadguard._codemod` and :mod:`loadguard._codemod_write`."""

from __future__ import annotations

import libcst as cst


def _class(module: cst.Module, name: str) -> cst.ClassDef | None:
    return next((n for n in module.body if isinstance(n, cst.ClassDef) and n.name.value == name), None)


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return next((n for n in body if isinstance(n, cst.FunctionDef) and n.name.value == name), None)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node).strip()


def _walk_statements(block: cst.BaseSuite):
    for statement in getattr(block, "body", ()):
        if isinstance(statement, cst.SimpleStatementLine):
            yield statement
        elif isinstance(statement, cst.BaseCompoundStatement):
            yield from _walk_statements(statement.body)
            orelse = getattr(statement, "orelse", None)
            if orelse is not None:
                yield from _walk_statements(orelse.body if isinstance(orelse, (cst.Else, cst.If)) else orelse)


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    return [target.value] if isinstance(target, cst.Name) else []


def _top_level(function: cst.FunctionDef, statement: cst.CSTNode) -> bool:
    return any(s is statement for s in function.body.body)


def _inside(function: cst.FunctionDef, statement: cst.CSTNode, kinds: tuple[type, ...]) -> bool:
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


def _parameters(function: cst.FunctionDef) -> list[str]:
    return [p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)]


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else line for line in text.splitlines())


_RANDOM = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "normal", "normal_", "uniform_", "bernoulli", "multinomial"})


def _random(node: cst.CSTNode) -> bool:
    found = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, call):
            name = _code(call.func)
            found.append(name.split(".")[-1] in _RANDOM or ".random." in f".{name}")

    node.visit(Calls())
    return any(found)
