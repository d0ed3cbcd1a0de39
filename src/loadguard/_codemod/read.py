"""Reading model code for ``loadguard fix`` through libcst: how a recorded line becomes an ``_init_weights`` branch
(:mod:`loadguard._codemod.write` writes it). Pure functions of source text; what to edit comes from a load
(:mod:`loadguard._fix.plan`). Example::

    branch = recompute(source, line=36, attribute="index", kind="buffer", on_meta=False)
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .constructor import (
    InitFacts,
    assignments_before,
    calling_init,
    free_call,
    made_value,
    replayable_if,
    self_call,
    with_device,
)
from .nodes import (
    assignment_code,
    at_top_level,
    attribute_code,
    class_named,
    code_of,
    draws_random,
    indented,
    method_named,
    nested_under,
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
    default_dtype: bool = False
    """The recompute depends on ``torch.get_default_dtype()`` (a factory without ``dtype=``, or the call itself): it
    runs under the dtype the model is loaded in, as ``__init__`` ran under ``from_pretrained(dtype=...)``."""


class Refused(Exception):
    """This line cannot be turned into a recompute mechanically; ``str()`` says why and what to change by hand.

    A source fix that could make some of its edits raises it with them: ``changed`` (file -> text) and ``description``
    are what it did (one text, or one per file), the message what it left for a person."""

    def __init__(self, reason: str, changed: dict[str, str] | None = None, description: str | dict[str, str] = ""):
        super().__init__(reason)
        self.changed = dict(changed or {})
        self.description = description


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
        self.dropped = {k for k, v in mapping.items() if v == "None"}
        """Names that stand for nothing here (``device`` of a tensor built where its value is copied to): an argument
        passing one is left out, ``.to(device)`` with it goes, rather than ``device=None`` or ``.to(None)``."""

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        dropped = [
            isinstance(arg.value, cst.Name) and arg.value.value in self.dropped and arg.star == ""
            for arg in original.args
        ]
        if not any(dropped):
            return updated
        if (
            isinstance(updated.func, cst.Attribute)
            and updated.func.attr.value == "to"
            and len(original.args) == 1
            and dropped[0]
        ):
            return updated.func.value  # .to(device) of a value copy_ puts where it belongs anyway
        if any(d and original.args[i].keyword is None for i, d in enumerate(dropped)):
            return updated  # a positional argument cannot be left out: None stays
        kept = [arg for arg, d in zip(updated.args, dropped) if not d]
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=kept)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.mapping.get(original.value, updated)


def recompute(
    source: str,
    line: int,
    attribute: str,
    kind: str,
    *,
    on_meta: bool,
    init_param: str = "module",
    available: frozenset[str] = frozenset(),
    owner: str | None = None,
) -> Branch:
    """The branch that recomputes ``self.<attribute>`` the way the code on ``line`` made it (the line
    :mod:`loadguard._hf.origins` recorded): the expression of its ``register_buffer`` / assignment with ``self.`` ->
    ``module.``, the local statements it reads before it, or -- made inside a helper method -- the helper called again
    as ``__init__`` calls it. ``kind``: parameter, buffer or attribute; ``available``: attributes the live instance has
    (an argument such as ``config`` that a ``PreTrainedModel`` keeps). ``owner``: the class of the module that holds the
    tensor, for a line in a free function of the file that the class's ``__init__`` calls with ``self`` (the call is
    replayed). Raises :class:`Refused` with the reason."""
    tree = cst.parse_module(source)
    statement, around = statement_at(tree, line)
    classes = [n for n in around if isinstance(n, cst.ClassDef)]
    functions = [n for n in around if isinstance(n, cst.FunctionDef)]
    free = None  # a function of the file (not a method) that makes the tensor on the module it is given
    if not classes and functions and owner is not None and class_named(tree, owner) is not None:
        free = functions[0]
        classes = [class_named(tree, owner)]
    if not classes or not functions:
        raise Refused(f"line {line} is not in a method of a class, nor in a function of this file its class calls")
    cls, function = classes[-1], functions[-1] if free is None else free
    init = method_named(cls, "__init__")
    if init is None:
        raise Refused(f"{cls.name.value} has no __init__ of its own")
    facts = InitFacts.of(init)
    if free is not None:
        helper = free.name.value
        calls = [
            st
            for st in walk_statements(init.body)
            for small in st.body
            if isinstance(small, cst.Expr) and free_call(small.value, helper)
        ]
        if not calls:
            raise Refused(
                f"line {line} is in {helper}(), a function of the file that {cls.name.value}.__init__ does not call "
                "with self"
            )
        anchor = calls[-1]
        expression = next(
            small.value for small in anchor.body if isinstance(small, cst.Expr) and free_call(small.value, helper)
        )
        expression = with_device(expression, function, attribute, on_meta, method=False)
    elif function is init:
        value = made_value(statement, attribute)
        if value is None:
            raise Refused(f"line {line} neither registers nor assigns self.{attribute}")
        anchor, expression, helper = statement, value, None
    else:
        helper = function.name.value
        init, calls = calling_init(tree, cls, init, helper)
        if not calls:
            raise Refused(
                f"self.{attribute} is made in {cls.name.value}.{helper}(), which no __init__ of its class or its bases in this file calls"
            )
        facts = InitFacts.of(init)
        anchor = calls[-1]
        expression = next(
            small.value for small in anchor.body if isinstance(small, cst.Expr) and self_call(small.value, helper)
        )
        expression = with_device(expression, function, attribute, on_meta)
    if nested_under(init, anchor, (cst.For, cst.While, cst.With, cst.Try)):
        raise Refused(f"self.{attribute} is made inside a loop, with or try block of {cls.name.value}.__init__")
    # made under an if of __init__, or by "a if c else None": only the instances that have it
    guard = None if at_top_level(init, anchor) and not isinstance(expression, cst.IfExp) else attribute
    before = assignments_before(init, anchor)
    pending, seen, used_parameters, needed_globals = list(_Names.of(expression)), set(), set(), set()
    chosen: list[cst.SimpleStatementLine] = []
    while pending:
        name = pending.pop()
        if name in seen or name == "self":
            continue
        seen.add(name)
        if name in before:
            for made in before[name]:
                if not at_top_level(init, made):
                    # assigned under an `if` of __init__: the whole `if` is replayed (its tests read from the config and
                    # constructor arguments as the rest does), when it does nothing but assign locals
                    made = replayable_if(init, made)
                    if made is None:
                        raise Refused(
                            f"self.{attribute} depends on {name!r}, which {cls.name.value}.__init__ assigns in a loop, "
                            "a with or try block, or an if that does more than assign local names"
                        )
                if made in chosen:
                    continue
                chosen.append(made)
                pending += (
                    list(_Names.of(made))
                    if isinstance(made, cst.If)
                    else [
                        n
                        for small in made.body
                        for n in _Names.of(
                            small.value if hasattr(small, "value") and small.value is not None else small
                        )
                    ]
                )
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
            mapping[name] = (
                f"{attribute_code(init_param, attribute)}.device" if helper is not None and not on_meta else "None"
            )
        elif name in facts.assigned or name in available:
            raise Refused(
                f"self.{attribute} depends on the constructor argument {name!r}, which {cls.name.value} does not keep (self.{name} holds something else)"
            )
        else:
            keep.append(name)
            mapping[name] = f"{init_param}.{name}"
    order = [
        s for s in init.body.body if s in chosen
    ]  # all top level: statements and replayed ifs, in __init__'s order
    if any(draws_random(node) for node in (expression, *order)):
        raise Refused(
            f"self.{attribute} is drawn from random numbers: no recompute can give the value the model was saved with"
        )
    rename = _Rename(mapping)
    statements = [code_of(s.visit(rename)) for s in order]
    value = code_of(expression.visit(rename))
    target = attribute_code(init_param, attribute)  # the name is the model's: data, never code
    # __init__ ran under the dtype the model is loaded in: the loaded tensor's dtype says it, no global state needed
    helper_code = [code_of(function)] if helper is not None else []
    loaded = value.replace("torch.get_default_dtype()", f"{target}.dtype")
    default_dtype = any(_DEFAULT_DTYPE.search(text) for text in (loaded, *statements, *helper_code))
    if not default_dtype:
        value = loaded
    if helper is not None:
        statements.append(value)
    elif kind == "parameter":
        statements.append(f"if not getattr({target}, '_is_hf_initialized', False):\n    {target}.copy_({value})")
    elif kind == "buffer" and on_meta:
        statements.append(
            f"if {target}.is_meta:\n    {assignment_code(init_param, attribute, value)}\nelse:\n    {target}.copy_({value})"
        )
    elif kind == "buffer":
        statements.append(f"{target}.copy_({value})")
    else:
        statements.append(assignment_code(init_param, attribute, value))
    if guard is not None:
        body = "\n".join(statements)
        statements = [f"if getattr({init_param}, {attribute!r}, None) is not None:\n" + indented(body)]
    position = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)[anchor].start.line
    return Branch(
        cls.name.value,
        tuple(statements),
        frozenset(needed_globals),
        tuple(keep),
        (attribute,),
        position,
        default_dtype,
    )


# what gives a different value under another default dtype: the default dtype itself, a float factory without dtype=
_DEFAULT_DTYPE = re.compile(
    r"get_default_dtype\(|\btorch\.(linspace|logspace|zeros|ones|full|empty|rand|randn|tensor)\((?![^()]*dtype)"
)


__all__ = ["Branch", "Refused", "recompute", "statement_at"]
