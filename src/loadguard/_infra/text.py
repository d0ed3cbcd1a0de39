"""Text a model controls (a folder name, a config value, a tensor name, an exception message), made safe for the report
it goes into: never a control character that a terminal, an XML parser or a Markdown table acts on.

- :func:`visible`: every control character (C0, DEL, C1) shown escaped, as Python writes it (``\\x1b``, ``\\n``, ``\\r``);
- :func:`xml`: :func:`visible` (XML 1.0 forbids most C0 characters outright; the others are shown the same way);
- :func:`cell`: one Markdown table cell: :func:`visible`, then ``|`` and HTML (``<``, ``>``, ``&``) escaped, so a row
  stays a row and no tag reaches a rendered page.
"""

from __future__ import annotations

import unicodedata

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


def cell(text: object) -> str:
    """One Markdown table cell: one line, no ``|`` that ends it, no HTML that renders."""
    return visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


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


__all__ = ["Markup", "cell", "styled", "unlinked", "visible", "xml"]
