"""What a class's ``__init__`` does, read through libcst for :mod:`loadguard._codemod.read`: the value a line gives an
attribute, the arguments it keeps, the locals it assigns (and the ``if`` that can be replayed around one), and the calls
of a helper method or a function of the file that make a tensor on the module."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .nodes import (
    assigned_targets,
    attribute_code,
    class_named,
    code_of,
    method_named,
    parameters_of,
    target_names,
    walk_statements,
)


def self_call(node: cst.BaseExpression, method: str | None = None) -> cst.Call | None:
    """``self.<method>(...)`` (any method when ``method`` is None)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name):
        if node.func.value.value == "self" and (method is None or node.func.attr.value == method):
            return node
    return None


def unwrap_parameter(node: cst.BaseExpression) -> cst.BaseExpression:
    """``nn.Parameter(x, ...)`` -> ``x``: the value, without making a new parameter (in both arms of ``a if c else b``)."""
    if isinstance(node, cst.IfExp):
        return node.with_changes(body=unwrap_parameter(node.body), orelse=unwrap_parameter(node.orelse))
    if isinstance(node, cst.Call) and node.args and code_of(node.func).split(".")[-1] == "Parameter":
        return node.args[0].value
    return node


def made_value(statement: cst.SimpleStatementLine, attribute: str) -> cst.BaseExpression | None:
    """The expression ``statement`` gives ``self.<attribute>``: a ``register_buffer`` / ``register_parameter`` call or an
    assignment (a parameter's ``nn.Parameter(...)`` unwrapped)."""
    for small in statement.body:
        if isinstance(small, cst.Expr) and (call := self_call(small.value)) is not None:
            if call.func.attr.value in ("register_buffer", "register_parameter") and len(call.args) >= 2:
                named = code_of(call.args[0].value).strip("'\"")
                if named == attribute:
                    value = next(
                        (
                            a.value
                            for a in call.args[1:]
                            if a.keyword is None or a.keyword.value in ("tensor", "param")
                        ),
                        None,
                    )
                    return unwrap_parameter(value) if value is not None else None
        targets = [] if isinstance(small, cst.AugAssign) else assigned_targets(small)  # `+=` gives no value of its own
        for target in targets:
            if (
                isinstance(target, cst.Attribute)
                and code_of(target) == f"self.{attribute}"
                and small.value is not None
            ):
                return unwrap_parameter(small.value)
    return None


@dataclass
class InitFacts:
    """A class's ``__init__``: its parameters, its statements in order, and which arguments it keeps as attributes."""

    function: cst.FunctionDef
    parameters: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # argument -> attribute it is stored in (self.x = x)
    assigned: set[str] = field(default_factory=set)  # every self.<attribute> it assigns

    @classmethod
    def of(cls, function: cst.FunctionDef) -> InitFacts:
        init = cls(
            function,
            [
                p.name.value
                for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
            ],
        )
        for statement in walk_statements(function.body):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        if isinstance(target.target, cst.Attribute) and code_of(target.target.value) == "self":
                            init.assigned.add(target.target.attr.value)
                            if isinstance(small.value, cst.Name) and small.value.value in init.parameters:
                                init.kept.setdefault(small.value.value, target.target.attr.value)
        return init


def replayable_if(function: cst.FunctionDef, statement: cst.CSTNode) -> cst.If | None:
    """The top-level ``if`` of ``function`` that holds ``statement``, when every branch of it (``elif`` and ``else``
    included, nested ``if`` too) only assigns local names: replaying it recomputes the local as ``__init__`` did."""

    def only_local_assignments(block) -> bool:
        for node in getattr(block, "body", ()):
            if isinstance(node, cst.If):
                if not (only_local_assignments(node.body) and _orelse_ok(node.orelse)):
                    return False
            elif isinstance(node, cst.SimpleStatementLine):
                for small in node.body:
                    if isinstance(small, cst.Pass):
                        continue
                    if not isinstance(small, (cst.Assign, cst.AnnAssign)):
                        return False
                    targets = assigned_targets(small)
                    if not all(isinstance(t, cst.Name) for t in targets):
                        return False
            else:
                return False
        return True

    def _orelse_ok(orelse) -> bool:
        if orelse is None:
            return True
        if isinstance(orelse, cst.If):
            return only_local_assignments(orelse.body) and _orelse_ok(orelse.orelse)
        return only_local_assignments(orelse.body)

    def holds(node: cst.CSTNode) -> bool:
        return any(s is statement for s in walk_statements(cst.IndentedBlock(body=[node])))

    top = next((s for s in function.body.body if isinstance(s, cst.If) and holds(s)), None)
    if top is None or not (only_local_assignments(top.body) and _orelse_ok(top.orelse)):
        return None
    return top


def assignments_before(function: cst.FunctionDef, stop: cst.CSTNode) -> dict[str, list[cst.SimpleStatementLine]]:
    """Local names assigned (``x = ...``) in ``function`` before ``stop``, with the statements, in order."""
    found: dict[str, list[cst.SimpleStatementLine]] = {}
    for statement in walk_statements(function.body):
        if statement is stop:
            break
        for small in statement.body:
            targets = assigned_targets(small)
            for target in targets:
                for name in target_names(target):
                    found.setdefault(name, []).append(statement)
    return found


def free_call(node: cst.BaseExpression, name: str) -> bool:
    """``name(self, ...)``: a function of the file called on the module being constructed."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == name
        and bool(node.args)
        and node.args[0].keyword is None
        and code_of(node.args[0].value) == "self"
    )


def calling_init(
    tree: cst.Module, cls: cst.ClassDef, init: cst.FunctionDef, helper: str
) -> tuple[cst.FunctionDef, list]:
    """The ``__init__`` that calls ``self.<helper>(...)`` for instances of ``cls``: its own, or -- through
    ``super().__init__`` -- a base class's of the same file (a subclass overriding the helper the base calls)."""
    for _ in range(4):
        calls = [
            s
            for s in walk_statements(init.body)
            for small in s.body
            if isinstance(small, cst.Expr) and self_call(small.value, helper)
        ]
        if calls:
            return init, calls
        bases = [class_named(tree, code_of(b.value)) for b in cls.bases if isinstance(b.value, cst.Name)]
        supers = any(
            isinstance(small, cst.Expr) and code_of(small.value).replace(" ", "").startswith("super().__init__(")
            for st in walk_statements(init.body)
            for small in st.body
        )
        found = next(((b, m) for b in bases if b is not None and (m := method_named(b, "__init__")) is not None), None)
        if not supers or found is None:
            return init, []
        cls, init = found
    return init, []


def with_device(
    call: cst.Call, helper: cst.FunctionDef, attribute: str, on_meta: bool, method: bool = True
) -> cst.Call:
    """A helper that takes ``device`` and is called without it: given the device the loaded tensor is on (the model may
    sit on a GPU), unless that tensor is on meta. ``method``: called as ``self.helper(...)`` (its ``self`` not among
    the call's arguments); a function of the file is called with the module as its first argument."""
    names = parameters_of(helper)
    if on_meta or "device" not in names:
        return call
    position = names.index("device") - (1 if method else 0)
    if (
        any(a.keyword is not None and a.keyword.value == "device" for a in call.args)
        or sum(a.keyword is None for a in call.args) > position
    ):
        return call
    argument = cst.Arg(
        keyword=cst.Name("device"),
        value=cst.parse_expression(f"{attribute_code('self', attribute)}.device"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    return call.with_changes(args=[*call.args, argument])


__all__ = [
    "InitFacts",
    "assignments_before",
    "calling_init",
    "free_call",
    "made_value",
    "replayable_if",
    "self_call",
    "unwrap_parameter",
    "with_device",
]
