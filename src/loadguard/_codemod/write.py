"""Writing the edits of ``loadguard fix`` through libcst (see :mod:`loadguard._codemod`, which reads): a branch added to
``_init_weights``, constructor arguments kept, in-place writes guarded, imports added; everything else in the file
stays as it was, comments and formatting included."""

from __future__ import annotations

import libcst as cst

from .layout import fit, preferred_quote, requote, same_call, width_of
from .nodes import (
    after_docstring,
    assigned_targets,
    assigns,
    bound_names,
    class_named,
    code_of,
    import_of,
    indented,
    method_named,
    module_names,
    parameters_of,
)
from .read import Branch, Refused


def merge(branches: list[Branch]) -> list[Branch]:
    """One branch per class, statements in the order ``__init__`` makes the tensors (a cache computed from
    ``inv_freq`` after ``inv_freq``), without repeats."""
    out: dict[str, Branch] = {}
    for branch in sorted(branches, key=lambda b: b.line):
        known = out.get(branch.cls)
        if known is None:
            out[branch.cls] = branch
            continue
        seen = {same_call(s, known.tensors + branch.tensors) for s in known.statements}
        statements = known.statements + tuple(
            s for s in branch.statements if same_call(s, known.tensors + branch.tensors) not in seen
        )
        out[branch.cls] = Branch(
            branch.cls,
            statements,
            known.globals | branch.globals,
            tuple(dict.fromkeys(known.keep + branch.keep)),
            known.tensors + branch.tensors,
            known.line,
            known.default_dtype or branch.default_dtype,
        )
    return list(out.values())


def _block(text: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(text + "\n").body)


def _branch_text(branch: Branch, init_param: str, owner: str = "self") -> str:
    body = "\n".join(branch.statements)
    recompute = f"with torch.no_grad():\n{indented(body, '    ')}"
    if branch.default_dtype:  # __init__ ran under the dtype the model is loaded in (from_pretrained(dtype=...))
        recompute = (
            "saved_default_dtype = torch.get_default_dtype()\n"
            f"if {owner}.dtype.is_floating_point:  # as __init__ ran: under the dtype the model is loaded in\n"
            f"    torch.set_default_dtype({owner}.dtype)\n"
            f"try:\n{indented(recompute, '    ')}\nfinally:\n    torch.set_default_dtype(saved_default_dtype)"
        )
    return f"if isinstance({init_param}, {branch.cls}):\n{indented(recompute, '    ')}"


def init_weights_parameter(source: str, cls_name: str) -> str | None:
    """What ``cls_name``'s own ``_init_weights`` calls its module (None: the class has none)."""
    cls = class_named(cst.parse_module(source), cls_name)
    function = method_named(cls, "_init_weights") if cls is not None else None
    if function is None:
        return None
    names = parameters_of(function)
    return names[1] if len(names) > 1 else None


def add_branches(source: str, cls_name: str, branches: list[Branch]) -> str:
    """``cls_name``'s ``_init_weights`` with ``branches`` first (before any early return); a class without one gets
    ``_init_weights`` calling its parent's, then the branches."""
    tree = cst.parse_module(source)
    quote, width = preferred_quote(source), width_of(source)
    cls = class_named(tree, cls_name)
    if cls is None:
        raise Refused(f"class {cls_name} is not defined at the top level of its file")
    function = method_named(cls, "_init_weights")
    if function is None and assigns(cls, "_init_weights"):
        raise Refused(f"{cls_name} assigns _init_weights (no def): a method added would drop it; edit it by hand")
    if function is not None:
        parameter = init_weights_parameter(source, cls_name) or "module"
        owner = (parameters_of(function) or ["self"])[0]
        at = 2 * len(tree.default_indent)  # a method of a top-level class: its body two levels in
        blocks = [
            s for b in branches for s in _block(fit(requote(_branch_text(b, parameter, owner), quote), width, at))
        ]
        body = list(function.body.body)
        at = after_docstring(body)
        new_function = function.with_changes(body=function.body.with_changes(body=[*body[:at], *blocks, *body[at:]]))
        new_cls = cls.with_changes(
            body=cls.body.with_changes(body=[new_function if s is function else s for s in cls.body.body])
        )
    else:
        text = "def _init_weights(self, module):\n    super()._init_weights(module)\n" + "\n".join(
            indented(fit(requote(_branch_text(b, "module"), quote), width, 2 * len(tree.default_indent)))
            for b in branches
        )
        method = _block(text)[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        new_cls = cls.with_changes(body=cls.body.with_changes(body=[*cls.body.body, method]))
    return tree.with_changes(body=[new_cls if s is cls else s for s in tree.body]).code


def keep_arguments(source: str, cls_name: str, names: list[str]) -> str:
    """``cls_name.__init__`` also stores the constructor arguments ``names`` (``self.x = x``), right after its
    ``super().__init__(...)`` call, so ``_init_weights`` can recompute what depends on them."""
    if not names:
        return source
    tree = cst.parse_module(source)
    cls = class_named(tree, cls_name)
    init = method_named(cls, "__init__") if cls is not None else None
    if init is None:
        raise Refused(f"{cls_name}.__init__ is not in this file")
    body = list(init.body.body)
    at = next(
        (
            i + 1
            for i, s in enumerate(body)
            if isinstance(s, cst.SimpleStatementLine) and "super().__init__(" in code_of(s).replace(" ", "")
        ),
        None,
    )
    if at is None:
        raise Refused(f"{cls_name}.__init__ does not call super().__init__() where the arguments could be kept")
    kept = _block("\n".join(f"self.{name} = {name}" for name in names))
    new_init = init.with_changes(body=init.body.with_changes(body=[*body[:at], *kept, *body[at:]]))
    new_cls = cls.with_changes(body=cls.body.with_changes(body=[new_init if s is init else s for s in cls.body.body]))
    return tree.with_changes(body=[new_cls if s is cls else s for s in tree.body]).code


def ensure_imports(source: str, imports: list[str]) -> str:
    """``source`` with each import statement of ``imports`` whose names it does not bind yet, after its last top-level
    import (or its docstring)."""
    tree = cst.parse_module(source)
    bound = set(module_names(tree))
    wanted = []
    for text in dict.fromkeys(imports):
        names = set(module_names(cst.parse_module(text + "\n")))
        if not names <= bound:
            wanted += _block(text)
            bound |= names
    if not wanted:
        return source
    relative = [w for w in wanted if isinstance(w.body[0], cst.ImportFrom) and w.body[0].relative]
    plain = [w for w in wanted if w not in relative]
    body = list(tree.body)
    if relative:
        last = _after_imports(body)
        body = [*body[:last], *relative, *body[last:]]
    if plain:
        first = _after_imports(body, absolute=True)
        body = [*body[:first], *plain, *body[first:]]
    return tree.with_changes(body=body).code


def _after_imports(body: list[cst.BaseStatement], absolute: bool = False) -> int:
    """Where a new top-level statement goes: after the last top-level import, else after the module's docstring.
    ``absolute``: a new absolute import, which goes with the file's absolute imports (before its relative ones, as
    isort and ruff order them)."""
    imports = [
        (i, s.body[0])
        for i, s in enumerate(body)
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], (cst.Import, cst.ImportFrom))
    ]
    if absolute:
        plain = [i for i, node in imports if not (isinstance(node, cst.ImportFrom) and node.relative)]
        relative = [i for i, node in imports if isinstance(node, cst.ImportFrom) and node.relative]
        if plain:
            return plain[-1] + 1
        if relative:
            return relative[0]
    return max((i + 1 for i, _ in imports), default=after_docstring(body))


def define_after_imports(source: str, block: str) -> str:
    """``source`` with the top-level definitions of ``block`` (a ``def``, a ``try`` import) after its imports, set apart by
    two blank lines as PEP 8 has it."""
    tree = cst.parse_module(source)
    body = list(tree.body)
    last = _after_imports(body)
    added = list(cst.parse_module(block).body)
    added[0] = added[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    following = body[last:]
    if following and not following[0].leading_lines:
        following[0] = following[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    return tree.with_changes(body=[*body[:last], *added, *following]).code


_INIT_FUNCTIONS = (
    "normal_",
    "uniform_",
    "zeros_",
    "ones_",
    "constant_",
    "trunc_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "eye_",
    "dirac_",
    "sparse_",
)


def _written_tensor(
    small: cst.BaseSmallStatement, parameter: str, tensors: frozenset[str] = frozenset()
) -> str | None:
    """``module.weight`` when ``small`` writes into it in place (``module.weight.data.normal_()``,
    ``nn.init.zeros_(module.bias)``, ``module.weight.data[0] = ...``), or ``p`` for a loop variable over the module's
    tensors (``for name, p in module.named_parameters(): p.data.normal_()``, in ``tensors``); None otherwise."""

    def root(node: cst.BaseExpression) -> str | None:
        while isinstance(node, (cst.Attribute, cst.Subscript)):
            if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == parameter:
                return f"{parameter}.{node.attr.value}"
            node = node.value
        return node.value if isinstance(node, cst.Name) and node.value in tensors else None

    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        if (
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value.endswith("_")
            and not call.func.attr.value.startswith("_")
        ):
            if (found := root(call.func.value)) is not None:
                return found
        # nn.init.normal_(...) is looked up when called: transformers 5 guards it; one imported by name is not
        if isinstance(call.func, cst.Name) and call.func.value in _INIT_FUNCTIONS and call.args:
            return root(call.args[0].value)
    if isinstance(small, (cst.Assign, cst.AugAssign)):
        targets = assigned_targets(small)
        for target in targets:
            if isinstance(target, cst.Subscript) and (found := root(target)) is not None:
                return found
    return None


_TENSOR_LOOPS = {"parameters": 0, "buffers": 0, "named_parameters": 1, "named_buffers": 1}


class _GuardWrites(cst.CSTTransformer):
    def __init__(self, parameter: str):
        self.parameter = parameter
        self.guarded = 0
        self.tensors: list[str] = []  # loop variables that are the module's own tensors, innermost last

    def _loop_tensor(self, node: cst.For) -> str | None:
        call = node.iter
        if not (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and code_of(call.func.value) == self.parameter
            and call.func.attr.value in _TENSOR_LOOPS
        ):
            return None
        index = _TENSOR_LOOPS[call.func.attr.value]
        target = node.target
        if isinstance(target, cst.Tuple) and len(target.elements) == 2:
            target = target.elements[index].value
        return target.value if isinstance(target, cst.Name) and (index == 0 or node.target is not target) else None

    def visit_For(self, node):
        self.tensors.append(self._loop_tensor(node) or "")

    def leave_For(self, original, updated):
        self.tensors.pop()
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        tensors = frozenset(t for t in self.tensors if t)
        written = sorted(
            {t for small in updated.body if (t := _written_tensor(small, self.parameter, tensors)) is not None}
        )
        if not written:
            return updated
        self.guarded += 1
        condition = " and ".join(f"not getattr({t}, '_is_hf_initialized', False)" for t in written)
        guard = _block(f"if {condition}:\n    pass")[0]
        return guard.with_changes(
            body=guard.body.with_changes(body=[updated.with_changes(leading_lines=[])]),
            leading_lines=updated.leading_lines,
        )


def guard_writes(source: str, cls_name: str) -> tuple[str, int]:
    """``cls_name._init_weights`` with every in-place write into a tensor of its module guarded by transformers 5's
    loaded flag (``_is_hf_initialized``): what it does for tensors the checkpoint lacks stays; a loaded one is left
    alone (on transformers 4 no tensor carries the flag: nothing changes). Returns the source and how many statements
    were guarded."""
    tree = cst.parse_module(source)
    cls = class_named(tree, cls_name)
    function = method_named(cls, "_init_weights") if cls is not None else None
    if function is None:
        raise Refused(f"{cls_name} defines no _init_weights in this file")
    names = parameters_of(function)
    guard = _GuardWrites(names[1] if len(names) > 1 else "module")
    new_function = function.visit(guard)
    new_cls = cls.with_changes(
        body=cls.body.with_changes(body=[new_function if s is function else s for s in cls.body.body])
    )
    return tree.with_changes(body=[new_cls if s is cls else s for s in tree.body]).code, guard.guarded


# --------------------------------------------------------------------------------------------------------------------
# the source edits workarounds stand for


def _replace_class(tree: cst.Module, cls: cst.ClassDef, new: cst.ClassDef) -> str:
    return tree.with_changes(body=[new if s is cls else s for s in tree.body]).code


def method_calls(source: str, cls_name: str, name: str) -> set[str] | None:
    """What ``cls_name.<name>`` calls, as written (``self.post_init``, ``super().__init__``); comments and strings do not
    count. None: the class does not define it in ``source``."""
    cls = class_named(cst.parse_module(source), cls_name)
    method = method_named(cls, name) if cls is not None else None
    if method is None:
        return None
    calls: set[str] = set()

    class Calls(cst.CSTVisitor):
        def visit_Call(self, node):
            calls.add(code_of(node.func).replace(" ", ""))

    method.visit(Calls())
    return calls


def append_to_init(source: str, cls_name: str, statement: str) -> str:
    """``cls_name.__init__`` with ``statement`` as its last line."""
    tree = cst.parse_module(source)
    cls = class_named(tree, cls_name)
    init = method_named(cls, "__init__") if cls is not None else None
    if init is None:
        raise Refused(f"{cls_name} has no __init__ of its own in this file")
    new_init = init.with_changes(body=init.body.with_changes(body=[*init.body.body, *_block(statement)]))
    return _replace_class(
        tree,
        cls,
        cls.with_changes(body=cls.body.with_changes(body=[new_init if s is init else s for s in cls.body.body])),
    )


def class_assignments(source: str, name: str) -> dict[str, str]:
    """``{class: the value's code}`` for every top-level class that assigns ``name`` in its body."""
    out = {}
    for cls in cst.parse_module(source).body:
        if isinstance(cls, cst.ClassDef) and isinstance(cls.body, cst.IndentedBlock):
            for statement in cls.body.body:
                if isinstance(statement, cst.SimpleStatementLine):
                    for small in statement.body:
                        targets = assigned_targets(small)
                        if (
                            any(isinstance(t, cst.Name) and t.value == name for t in targets)
                            and small.value is not None
                        ):
                            out[cls.name.value] = code_of(small.value)
    return out


def set_class_attribute(source: str, cls_name: str, name: str, value: str) -> str:
    """``cls_name``'s class-level ``name = ...`` with ``value`` (code) on the right."""
    tree = cst.parse_module(source)
    cls = class_named(tree, cls_name)

    class Setter(cst.CSTTransformer):
        def leave_Assign(self, original, updated):
            if any(isinstance(t.target, cst.Name) and t.target.value == name for t in updated.targets):
                return updated.with_changes(value=cst.parse_expression(value))
            return updated

        def leave_AnnAssign(self, original, updated):
            if isinstance(updated.target, cst.Name) and updated.target.value == name:
                return updated.with_changes(value=cst.parse_expression(value))
            return updated

        def visit_FunctionDef(self, node):
            return False

    return _replace_class(tree, cls, cls.visit(Setter()))


__all__ = [
    "append_to_init",
    "define_after_imports",
    "method_calls",
    "class_assignments",
    "set_class_attribute",
    "add_branches",
    "bound_names",
    "ensure_imports",
    "guard_writes",
    "import_of",
    "init_weights_parameter",
    "keep_arguments",
    "merge",
    "module_names",
]
