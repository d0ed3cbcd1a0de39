"""Text a model controls (a folder name, a config value, a tensor name, an exception message), made safe for the report
it goes into: never a control character that a terminal, an XML parser or a Markdown table acts on.

- :func:`visible`: every control character (C0, DEL, C1) shown escaped, as Python writes it (``\\x1b``, ``\\n``, ``\\r``);
- :func:`xml`: :func:`visible` (XML 1.0 forbids most C0 characters outright; the others are shown the same way);
- :func:`inert`, :func:`code`, :func:`fence`: Markdown (CommonMark, as GitHub and the Hub render it) that shows the text
  and nothing else: prose with its markup characters escaped and its links and ``@mentions`` in code spans, a code span
  or a fenced block longer than any backtick run inside; :func:`cell` is :func:`inert` in a table cell (``|`` escaped),
  so a row stays a row.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from rich.markup import escape
from rich.style import Style
from rich.text import Span

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: object, keep: str = "") -> str:
    """``text`` with each control character escaped (``\\x1b``, ``\\n``) but those in ``keep``, everything else as it
    is."""
    out = []
    for char in str(text):
        if char in keep:
            out.append(char)
        elif unicodedata.category(char) == "Cc" or char in ("\u2028", "\u2029"):
            out.append(_NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"))
        elif 0xD800 <= ord(char) <= 0xDFFF or char in (
            "\ufffe",
            "\uffff",
        ):  # not text (a lone surrogate, a non-character)
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``"1 tensor"``, ``"2 tensors"``: a count with its noun in the right number (``many``: an irregular plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def xml(text: object) -> str:
    """Text every XML 1.0 parser accepts: control characters escaped as :func:`visible` does (ElementTree escapes
    ``<``, ``>``, ``&`` and quotes itself)."""
    return visible(text)


# what GitHub and the Hub turn into a link or a notification even in plain text (GFM's extended autolinks, mentions)
_LIVE = re.compile(r"(?:[a-zA-Z][a-zA-Z0-9+.-]*://|www\.)[^\s<>]+|(?<!\w)@[\w-]+|[^\s<>@]+@[^\s<>]+\.\w+")
# characters that open Markdown (emphasis, code, links and images, tables, strikethrough, math): backslash-escaped;
# HTML and entities (<, >, &) are written as entities
_MARKUP = re.compile(r"([\\`*\[\]!|~#$]|(?<![^\W_])_|_(?![^\W_]))")  # "_" inside a word opens nothing


def code(text: object, table: bool = False) -> str:
    """``text`` as one inline code span: one line (:func:`visible`), opened and closed by a run of backticks longer than
    any inside it, so nothing in it renders (``table``: in a table cell, whose ``|`` must be escaped even there)."""
    shown = visible(text) or " "
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    ticks = "`" * (longest + 1)
    # CommonMark drops one space at each end of a span that starts and ends with one (not of one all spaces)
    pad = " " if "`" in (shown[0], shown[-1]) or (shown[0] == shown[-1] == " " and shown.strip(" ")) else ""
    return f"{ticks}{pad}{shown.replace('|', chr(92) + '|') if table else shown}{pad}{ticks}"


def fence(text: str, info: str = "") -> str:
    """``text`` (lines of code, a diff) as a fenced block a line of its own cannot close: the fence is longer than
    any backtick run in it; control characters but tabs are shown escaped."""
    shown = "\n".join(visible(line, keep="\t") for line in text.split("\n"))
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{shown}\n{ticks}"


def inert(text: object, table: bool = False) -> str:
    """Prose that holds what a model controls, as Markdown that renders as that text and nothing else: one line, every
    character that opens markup backslash-escaped, links, addresses and ``@mentions`` in code spans (GitHub links and
    notifies them in plain text). ``table``: one table cell."""
    shown, out, last = visible(text), [], 0
    for live in _LIVE.finditer(shown):
        out += [_escaped(shown[last : live.start()]), code(live.group(), table)]
        last = live.end()
    out.append(_escaped(shown[last:]))
    return "".join(out)


def _escaped(text: str) -> str:
    return _MARKUP.sub(r"\\\1", text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def cell(text: object) -> str:
    """One Markdown table cell: one line, no ``|`` that ends it, nothing that renders as markup (:func:`inert`)."""
    return inert(text, table=True)


class Markup(str):
    """Text of loadguard's own with rich ``[style]`` tags: the only text the consoles read tags in. Everything else is
    shown as written (a folder ``model[v2]``, a hint ``loadguard[ray]``, a help's ``[default: table]``)."""


def styled(template: str, *values: object) -> Markup:
    """``template`` (ours: ``[style]`` tags, ``{}`` fields) filled with ``values``, each shown as text (its brackets
    escaped) unless it is :class:`Markup` itself."""

    return Markup(template.format(*(value if isinstance(value, Markup) else escape(str(value)) for value in values)))


def unlinked(text):
    """A rich ``Text`` without hyperlinks (markup's ``[link=...]``: an OSC 8 sequence in a terminal): nothing printed
    links anywhere."""

    def plain(style):
        if isinstance(style, str):
            if "link" not in style:
                return style
            try:
                style = Style.parse(style)
            except Exception:  # a theme name: no link in it
                return style
        return style.clear_meta_and_links() if style.link else style

    text.spans = [Span(span.start, span.end, plain(span.style)) for span in text.spans]
    return text


INDEX = re.compile(r"(?<=\.)(\d+)(?=\.|$)")
"""A layer index inside a dotted tensor name (``layers.12.mlp``)."""


def collapse_names(names: Iterable[str]) -> list[str]:
    """``layers.0.x``, ``layers.1.x`` ... -> ``layers.{0...31}.x``, as transformers' LOAD REPORT does."""
    groups: dict[str, list[tuple[int, ...]]] = {}
    for name in names:
        template = INDEX.sub("{}", name)
        groups.setdefault(template, []).append(tuple(int(i) for i in INDEX.findall(name)))
    out = []
    for template, indices in groups.items():
        if not indices[0] or len(indices) == 1:
            out.append(template.format(*indices[0]) if indices[0] else template)
            continue
        parts = [_span(sorted({ix[pos] for ix in indices})) for pos in range(len(indices[0]))]
        out.append(template.format(*parts))
    return out


def _span(values: list[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    if values == list(range(values[0], values[-1] + 1)):
        return f"{{{values[0]}...{values[-1]}}}"
    return "{" + ",".join(map(str, values)) + "}"


__all__ = [
    "INDEX",
    "collapse_names",
    "Markup",
    "cell",
    "code",
    "fence",
    "inert",
    "styled",
    "unlinked",
    "visible",
    "xml",
]
