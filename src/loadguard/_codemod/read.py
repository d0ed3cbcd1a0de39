"""Reading model code for ``loadguard fix`` through libcst: how a recorded line becomes an ``_init_weights`` branch
(:mod:`loadguard._codemod.write` writes it). Pure functions of source text; what to edit comes from a load
(:mod:`loadguard._fix.plan`). Example::

    branch = recompute(source, line=36, attribute="index", kind="buffer", on_meta=False)
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .nodes import (
    at_top_level,
    class_named,
    code_of,
    draws_random,
    indented,
    method_named,
    nested_under,
    parameters_of,
    target_names,
    walk_statements,
)

_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Branch:
    """The statements that recompute tensors of instances of ``cls`` inside ``_init_weights`` (its module parameter
    spelled ``module``), and what they need: names of the file that defines ``cls`` and constructor arguments kept."""

    cls: str
    statements: tuple[str, ...]
    globals: frozenset[str] = frozenset()
    keep: tuple[str, ...] = ()
    tensors: tuple[str, ...] = ()
    line: int = (
        0  # where __init__ makes it: recomputes run in __init__'s order (a cache computed from inv_freq after it)
    )


class Refused(Exception):
    """This line cannot be turned into a recompute mechanically; ``str()`` says why and what to change by hand."""


# --------------------------------------------------------------------------------------------------------------------
# reading


class _Locator(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int):
        self.line = line
        self.stack: list[cst.CSTNode] = []
        self.found: tuple[cst.CSTNode, tuple[cst.CSTNode, ...]] | None = None

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try)):
            self.stack.append(node)
        if isinstance(node, cst.SimpleStatementLine):
            where = self.get_metadata(PositionProvider, node)
            if where.start.line <= self.line <= where.end.line:
                self.found = (node, tuple(self.stack))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.stack and self.stack[-1] is original_node:
            self.stack.pop()


def statement_at(module: cst.Module, line: int) -> tuple[cst.SimpleStatementLine, tuple[cst.CSTNode, ...]]:
    """The simple statement on ``line`` and the compound statements around it, outermost first."""
    locator = _Locator(line)
    MetadataWrapper(module, unsafe_skip_copy=True).visit(locator)
    if locator.found is None:
        raise Refused(f"line {line} holds no simple statement")
    return locator.found  # type: ignore[return-value]


class _Names(cst.CSTVisitor):
    """Names an expression reads, less those it binds itself (comprehension targets, lambda parameters)."""

    def __init__(self):
        self.read: set[str] = set()
        self.bound: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.bound |= _Names.of(node.target)

    def visit_Param(self, node: cst.Param) -> None:
        self.bound.add(node.name.value)

    def visit_Name(self, node: cst.Name) -> None:
        self.read.add(node.value)

    @staticmethod
    def of(node: cst.CSTNode) -> set[str]:
        names = _Names()
        node.visit(names)
        return names.read - names.bound


class _Rename(cst.CSTTransformer):
    """Names read replaced by expressions (``self`` -> ``module``, a kept argument -> ``module.arg``); attribute and
    keyword names are left alone."""

    def __init__(self, mapping: dict[str, str]):
        self.mapping = {k: cst.parse_expression(v) for k, v in mapping.items()}

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.mapping.get(original.value, updated)


def _self_call(node: cst.BaseExpression, method: str | None = None) -> cst.Call | None:
    """``self.<method>(...)`` (any method when ``method`` is None)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name):
        if node.func.value.value == "self" and (method is None or node.func.attr.value == method):
            return node
    return None


def _unwrap_parameter(node: cst.BaseExpression) -> cst.BaseExpression:
    """``nn.Parameter(x, ...)`` -> ``x``: the value, without making a new parameter (in both arms of ``a if c else b``)."""
    if isinstance(node, cst.IfExp):
        return node.with_changes(body=_unwrap_parameter(node.body), orelse=_unwrap_parameter(node.orelse))
    if isinstance(node, cst.Call) and node.args and code_of(node.func).split(".")[-1] == "Parameter":
        return node.args[0].value
    return node


def _made_value(statement: cst.SimpleStatementLine, attribute: str) -> cst.BaseExpression | None:
    """The expression ``statement`` gives ``self.<attribute>``: a ``register_buffer`` / ``register_parameter`` call or an
    assignment (a parameter's ``nn.Parameter(...)`` unwrapped)."""
    for small in statement.body:
        if isinstance(small, cst.Expr) and (call := _self_call(small.value)) is not None:
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
                    return _unwrap_parameter(value) if value is not None else None
        targets = (
            [t.target for t in small.targets]
            if isinstance(small, cst.Assign)
            else [small.target]
            if isinstance(small, cst.AnnAssign)
            else []
        )
        for target in targets:
            if (
                isinstance(target, cst.Attribute)
                and code_of(target) == f"self.{attribute}"
                and small.value is not None
            ):
                return _unwrap_parameter(small.value)
    return None


@dataclass
class _Init:
    """A class's ``__init__``: its parameters, its statements in order, and which arguments it keeps as attributes."""

    function: cst.FunctionDef
    parameters: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # argument -> attribute it is stored in (self.x = x)
    assigned: set[str] = field(default_factory=set)  # every self.<attribute> it assigns

    @classmethod
    def of(cls, function: cst.FunctionDef) -> _Init:
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


def _assignments_before(function: cst.FunctionDef, stop: cst.CSTNode) -> dict[str, list[cst.SimpleStatementLine]]:
    """Local names assigned (``x = ...``) in ``function`` before ``stop``, with the statements, in order."""
    found: dict[str, list[cst.SimpleStatementLine]] = {}
    for statement in walk_statements(function.body):
        if statement is stop:
            break
        for small in statement.body:
            targets = (
                [t.target for t in small.targets]
                if isinstance(small, cst.Assign)
                else [small.target]
                if isinstance(small, cst.AnnAssign)
                else []
            )
            for target in targets:
                for name in target_names(target):
                    found.setdefault(name, []).append(statement)
    return found


def recompute(
    source: str,
    line: int,
    attribute: str,
    kind: str,
    *,
    on_meta: bool,
    init_param: str = "module",
    available: frozenset[str] = frozenset(),
) -> Branch:
    """The branch that recomputes ``self.<attribute>`` the way the code on ``line`` made it (the line
    :mod:`loadguard._hf.origins` recorded): the expression of its ``register_buffer`` / assignment with ``self.`` ->
    ``module.``, the local statements it reads before it, or -- made inside a helper method -- the helper called again
    as ``__init__`` calls it. ``kind``: parameter, buffer or attribute; ``available``: attributes the live instance has
    (an argument such as ``config`` that a ``PreTrainedModel`` keeps). Raises :class:`Refused` with the reason."""
    tree = cst.parse_module(source)
    statement, around = statement_at(tree, line)
    classes = [n for n in around if isinstance(n, cst.ClassDef)]
    functions = [n for n in around if isinstance(n, cst.FunctionDef)]
    if not classes or not functions:
        raise Refused(f"line {line} is not in a method of a class")
    cls, function = classes[-1], functions[-1]
    init = method_named(cls, "__init__")
    if init is None:
        raise Refused(f"{cls.name.value} has no __init__ of its own")
    facts = _Init.of(init)
    if function is init:
        value = _made_value(statement, attribute)
        if value is None:
            raise Refused(f"line {line} neither registers nor assigns self.{attribute}")
        anchor, expression, helper = statement, value, None
    else:
        helper = function.name.value
        init, calls = _calling_init(tree, cls, init, helper)
        if not calls:
            raise Refused(
                f"self.{attribute} is made in {cls.name.value}.{helper}(), which no __init__ of its class or its bases in this file calls"
            )
        facts = _Init.of(init)
        anchor = calls[-1]
        expression = next(
            small.value for small in anchor.body if isinstance(small, cst.Expr) and _self_call(small.value, helper)
        )
        expression = _with_device(expression, function, attribute, on_meta)
    if nested_under(init, anchor, (cst.For, cst.While, cst.With, cst.Try)):
        raise Refused(f"self.{attribute} is made inside a loop, with or try block of {cls.name.value}.__init__")
    # made under an if of __init__, or by "a if c else None": only the instances that have it
    guard = None if at_top_level(init, anchor) and not isinstance(expression, cst.IfExp) else attribute
    before = _assignments_before(init, anchor)
    pending, seen, used_parameters, needed_globals = list(_Names.of(expression)), set(), set(), set()
    chosen: list[cst.SimpleStatementLine] = []
    while pending:
        name = pending.pop()
        if name in seen or name == "self":
            continue
        seen.add(name)
        if name in before:
            made = before[name][-1]
            if not at_top_level(init, made):
                raise Refused(
                    f"self.{attribute} depends on {name!r}, which {cls.name.value}.__init__ assigns conditionally or in a loop"
                )
            if made not in chosen:
                chosen.append(made)
            pending += [
                n
                for small in made.body
                for n in _Names.of(small.value if hasattr(small, "value") and small.value is not None else small)
            ]
        elif name in facts.parameters:
            used_parameters.add(name)
        elif name not in _BUILTINS:
            needed_globals.add(name)
    if init_param in seen:
        raise Refused(f"{cls.name.value}.__init__ uses a name {init_param!r}, which _init_weights calls its module")
    mapping, keep = {"self": init_param}, []
    for name in sorted(used_parameters):
        if name in facts.kept:
            mapping[name] = f"{init_param}.{facts.kept[name]}"
        elif name == "config" and "config" in available:
            mapping[name] = f"{init_param}.config"
        elif (
            name == "device"
        ):  # where __init__ was told to build it: where the loaded tensor is (copy_ moves a value there)
            mapping[name] = f"{init_param}.{attribute}.device" if helper is not None and not on_meta else "None"
        elif name in facts.assigned or name in available:
            raise Refused(
                f"self.{attribute} depends on the constructor argument {name!r}, which {cls.name.value} does not keep (self.{name} holds something else)"
            )
        else:
            keep.append(name)
            mapping[name] = f"{init_param}.{name}"
    order = [s for s in walk_statements(init.body) if s in chosen]
    if any(draws_random(node) for node in (expression, *order)):
        raise Refused(
            f"self.{attribute} is drawn from random numbers: no recompute can give the value the model was saved with"
        )
    rename = _Rename(mapping)
    statements = [code_of(s.visit(rename)) for s in order]
    value = code_of(expression.visit(rename))
    target = f"{init_param}.{attribute}"
    if helper is not None:
        statements.append(value)
    elif kind == "parameter":
        statements.append(f"if not getattr({target}, '_is_hf_initialized', False):\n    {target}.copy_({value})")
    elif kind == "buffer" and on_meta:
        statements.append(f"if {target}.is_meta:\n    {target} = {value}\nelse:\n    {target}.copy_({value})")
    elif kind == "buffer":
        statements.append(f"{target}.copy_({value})")
    else:
        statements.append(f"{target} = {value}")
    if guard is not None:
        body = "\n".join(statements)
        statements = [f"if getattr({init_param}, {attribute!r}, None) is not None:\n" + indented(body)]
    position = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)[anchor].start.line
    return Branch(cls.name.value, tuple(statements), frozenset(needed_globals), tuple(keep), (attribute,), position)


def _calling_init(
    tree: cst.Module, cls: cst.ClassDef, init: cst.FunctionDef, helper: str
) -> tuple[cst.FunctionDef, list]:
    """The ``__init__`` that calls ``self.<helper>(...)`` for instances of ``cls``: its own, or -- through
    ``super().__init__`` -- a base class's of the same file (a subclass overriding the helper the base calls)."""
    for _ in range(4):
        calls = [
            s
            for s in walk_statements(init.body)
            for small in s.body
            if isinstance(small, cst.Expr) and _self_call(small.value, helper)
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


def _with_device(call: cst.Call, helper: cst.FunctionDef, attribute: str, on_meta: bool) -> cst.Call:
    """A helper that takes ``device`` and is called without it: given the device the loaded tensor is on (the model may
    sit on a GPU), unless that tensor is on meta."""
    names = parameters_of(helper)
    if on_meta or "device" not in names:
        return call
    position = names.index("device") - 1  # self
    if (
        any(a.keyword is not None and a.keyword.value == "device" for a in call.args)
        or sum(a.keyword is None for a in call.args) > position
    ):
        return call
    argument = cst.Arg(
        keyword=cst.Name("device"),
        value=cst.parse_expression(f"self.{attribute}.device"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    return call.with_changes(args=[*call.args, argument])


__all__ = ["Branch", "Refused", "recompute", "statement_at"]
