"""The table (the default; ``human`` is its former name): for a terminal or a CI log, printed through rich consoles: the
result to ``out`` (stdout), notes and the next step (``Hint:``) to ``err``."""

from __future__ import annotations


def emit(output, out, err) -> None:
    output.table(out, err)


__all__ = ["emit"]
