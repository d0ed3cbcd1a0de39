"""The rewrites the workarounds' source fixes make in a model's files: config reads given transformers 4's defaults,
an import under another name, a method made to accept the keywords transformers 5 passes. Pure functions of source
text."""

from __future__ import annotations

import libcst as cst

from .layout import preferred_quote, string_literal
from .nodes import code_of


def import_as(source: str, module: str, renamed: dict[str, str]) -> str:
    """``from <module> import Old`` -> ``from <module> import New as Old`` for each ``Old: New`` in ``renamed``."""

    class Renamer(cst.CSTTransformer):
        def leave_ImportFrom(self, original, updated):
            if (
                updated.module is None
                or code_of(updated.module) != module
                or isinstance(updated.names, cst.ImportStar)
            ):
                return updated
            names = [
                a.with_changes(
                    name=cst.Name(renamed[a.evaluated_name]), asname=cst.AsName(name=cst.Name(a.evaluated_name))
                )
                if a.evaluated_name in renamed and a.asname is None
                else a
                for a in updated.names
            ]
            return updated.with_changes(names=names)

    return cst.parse_module(source).visit(Renamer()).code


def accept_keywords(source: str, function: str, positional: int = 1) -> str:
    """Every ``def <function>(self)`` (exactly ``positional`` parameters and no ``**``) also takes ``**kwargs``: the
    keywords a newer caller passes are accepted and ignored."""

    class Widen(cst.CSTTransformer):
        def leave_FunctionDef(self, original, updated):
            params = updated.params
            if (
                updated.name.value != function
                or params.star_kwarg is not None
                or len(params.params) != positional
                or params.kwonly_params
            ):
                return updated
            return updated.with_changes(params=params.with_changes(star_kwarg=cst.Param(name=cst.Name("kwargs"))))

    return cst.parse_module(source).visit(Widen()).code


class _Reads(cst.CSTTransformer):
    """A transformer of attribute reads that leaves writes alone: assignment targets are not visited, and the targets
    of ``x: T = ...``, ``x += ...`` and ``del x`` are remembered as writes."""

    def __init__(self):
        super().__init__()
        self.written: set = set()

    def is_written(self, node: cst.CSTNode) -> bool:
        return node in self.written

    def visit_AssignTarget(self, node):
        return False

    def visit_AnnAssign(self, node):
        self.written.add(node.target)

    def visit_AugAssign(self, node):
        self.written.add(node.target)

    def visit_Del(self, node):
        self.written.add(node.target)


def reads_through(source: str, attribute: str, helper: str) -> tuple[str, int]:
    """Every read of ``<...>.<attribute>`` -> ``<helper>(<...>.<attribute>)``; writes are left alone. Returns the new
    source and how many reads it wrapped."""

    class Wrap(_Reads):
        count = 0

        def leave_Attribute(self, original, updated):
            if updated.attr.value != attribute or self.is_written(original):
                return updated
            self.count += 1
            return cst.Call(func=cst.Name(helper), args=[cst.Arg(updated)])

    wrap = Wrap()
    return cst.parse_module(source).visit(wrap).code, wrap.count


def config_reads(source: str, defaults: dict[str, object]) -> str:
    """Reads of ``<...>config.<name>`` for ``name`` in ``defaults`` -> ``getattr(<...>config, "<name>", default)``, and
    of ``self.<name>`` inside a config class (a ``configuration_*.py`` reading its own generation defaults); assignments
    to them are left alone: what transformers 4 configs always carried, read the way that works on 5."""

    preferred = preferred_quote(source)

    class Reads(_Reads):
        def __init__(self):
            super().__init__()
            self.configs: list[bool] = []  # for each class around: whether it is a config class (its reads of self.x)
            self.quotes: list[str] = []  # the delimiters of the f-strings around (before 3.12 none may appear inside)

        def visit_ClassDef(self, node):
            self.configs.append(any(code_of(b.value).endswith("Config") for b in node.bases))

        def leave_ClassDef(self, original, updated):
            self.configs.pop()
            return updated

        def visit_FormattedString(self, node):
            self.quotes.append(node.start.lstrip("rRfFbBuU"))

        def leave_FormattedString(self, original, updated):
            self.quotes.pop()
            return updated

        def leave_Attribute(self, original, updated):
            owner = code_of(updated.value)
            inside_config = bool(self.configs) and self.configs[-1] and owner == "self"
            if self.is_written(original):
                return updated
            if updated.attr.value in defaults and (inside_config or owner.split(".")[-1] in ("config", "text_config")):
                quote = (
                    preferred if not any(preferred in q for q in self.quotes) else ("'" if preferred == '"' else '"')
                )
                name, default = updated.attr.value, _literal(defaults[updated.attr.value], quote)
                return cst.parse_expression(
                    f"getattr({code_of(updated.value)}, {string_literal(name, quote)}, {default})"
                )
            return updated

    return cst.parse_module(source).visit(Reads()).code


def _literal(value: object, quote: str) -> str:
    """A config default as code, its strings in ``quote``."""
    if isinstance(value, str):
        return string_literal(value, quote)
    if isinstance(value, (list, tuple)):
        items = ", ".join(_literal(v, quote) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k, quote)}: {_literal(v, quote)}" for k, v in value.items()) + "}"
    return repr(value)


__all__ = ["accept_keywords", "config_reads", "import_as"]
