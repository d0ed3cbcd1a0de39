"""How the code ``loadguard fix`` writes is laid out to look like the file it goes into: within the file's width
(broken as black breaks a line), in the file's own quotes. Pure functions of source text."""

from __future__ import annotations

import io
import re
import tokenize

import libcst as cst

from .nodes import code_of


def same_call(statement: str, tensors: tuple[str, ...]) -> str:
    """A statement as merging compares it: one helper call that makes several tensors is one call, whichever of them
    lent it the dtype of the load (``module.cos_cached.dtype`` or ``module.sin_cached.dtype``)."""
    names = "|".join(re.escape(name.rpartition(".")[2]) for name in tensors)
    return re.sub(rf"(?:\.(?:{names})|getattr\(\w+, ['\"](?:{names})['\"]\))\.dtype\b", ".<loaded>.dtype", statement)


def width_of(source: str) -> int:
    """How wide a file lets its lines be: its widest line, and at least 79 (PEP 8's width)."""
    return max([79, *(len(line) for line in source.splitlines())])


def _top_level_commas(text: str) -> list[int] | None:
    """Where ``text`` (call arguments) splits at commas outside brackets and strings; None when it does not tokenize."""

    depth, commas = 0, []
    offsets = [0]
    for line in text.splitlines(True):
        offsets.append(offsets[-1] + len(line))
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.OP:
                continue
            if token.string in "([{":
                depth += 1
            elif token.string in ")]}":
                depth -= 1
            elif token.string == "," and depth == 0:
                commas.append(offsets[token.start[0] - 1] + token.start[1])
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return commas


def _closing(text: str, opening: int) -> int | None:
    """The index of the bracket that closes ``text[opening]`` (strings skipped by tokenizing what follows)."""

    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text[opening:]).readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
                if depth == 0:
                    return opening + token.start[1] if token.start[0] == 1 else None
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return None


def fit(code: str, width: int, indent: int = 0) -> str:
    """Generated statements within ``width`` columns once indented by ``indent``: a line too wide is broken as black
    breaks it (a conditional expression over three lines in parentheses, a call's arguments one per line); a line that
    cannot be broken so stays as it is."""
    out = []
    for line in code.split("\n"):
        out.extend(_fit_line(line, width - indent, 0))
    return "\n".join(out)


def _fit_line(line: str, width: int, depth: int) -> list[str]:
    if len(line) <= width or depth > 4:
        return [line]
    lead = line[: len(line) - len(line.lstrip())]
    body = line.strip()
    if body.endswith(",") and depth:  # an argument of the call broken above: broken the same way, its comma kept
        lines = _fit_line(f"{lead}{body[:-1]}", width, depth)
        return [*lines[:-1], lines[-1] + ","]
    try:
        statement = cst.parse_statement(body + "\n")
    except cst.ParserSyntaxError:
        return [line]
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    value = getattr(small, "value", None)
    if isinstance(small, cst.Assign) and isinstance(value, cst.IfExp):  # x = a if c else b
        target = body[: body.index("=") + 1]
        parts = [code_of(value.body), f"if {code_of(value.test)}", f"else {code_of(value.orelse)}"]
        inner = [piece for part in parts for piece in _fit_line(f"{lead}    {part}", width, depth + 1)]
        return [f"{lead}{target} (", *inner, f"{lead})"]
    if not body.endswith(")"):
        return [line]
    opening = next(
        (i for i in range(len(body)) if body[i] == "(" and _closing(body, i) == len(body) - 1), None
    )  # the call whose arguments end the line
    if opening is None or opening == 0:
        return [line]
    arguments = body[opening + 1 : -1]
    commas = _top_level_commas(arguments)
    if commas is None or not arguments.strip():
        return [line]
    pieces, start = [], 0
    for comma in [*commas, len(arguments)]:
        piece = arguments[start:comma].strip()
        if piece:
            pieces.append(piece)
        start = comma + 1
    inner = [piece for arg in pieces for piece in _fit_line(f"{lead}    {arg},", width, depth + 1)]
    return [f"{lead}{body[: opening + 1]}", *inner, f"{lead})"]


def preferred_quote(source: str) -> str:
    """The quote a file writes its plain strings with (``"`` or ``'``, the more common; ``"`` on a tie)."""

    counts = {'"': 0, "'": 0}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING:
                body = token.string.lstrip("rRbBuUfF")
                if body[:1] in counts and body[:3] not in ('"""', "'''"):
                    counts[body[0]] += 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return "'" if counts["'"] > counts['"'] else '"'


def string_literal(value: str, quote: str = '"') -> str:
    """``value`` as a Python string literal in ``quote`` (``repr``'s escapes; the other quote where ``value`` holds it)."""
    text = repr(value)[1:-1]
    if quote == '"':
        text = text.replace("\\'", "'")
        if '"' in value:
            return repr(value) if "'" not in value else '"' + text.replace('"', '\\"') + '"'
        return f'"{text}"'
    return repr(value) if "'" not in value or '"' in value else '"' + text.replace("\\'", "'") + '"'


def requote(code: str, quote: str) -> str:
    """Generated code with its plain string literals in ``quote`` (a file's own style), where the swap needs no escape;
    f-strings and byte strings are left as written."""

    class Quotes(cst.CSTTransformer):
        def leave_SimpleString(self, original, updated):
            prefix = updated.value[: len(updated.value) - len(updated.value.lstrip("rRbBuU"))]
            body = updated.value[len(prefix) :]
            if prefix or body[:3] in ('"""', "'''") or body[0] == quote:
                return updated
            inner = body[1:-1]
            if quote in inner or "\\" in inner:
                return updated
            return updated.with_changes(value=f"{quote}{inner}{quote}")

    try:
        return cst.parse_module(code).visit(Quotes()).code
    except cst.ParserSyntaxError:
        return code


__all__ = ["fit", "preferred_quote", "requote", "same_call", "string_literal", "width_of"]
