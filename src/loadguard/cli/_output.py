"""Where a command's result goes: :func:`write` hands it to the emitter ``--format`` names (:mod:`loadguard.formats`)
and writes what comes back to stdout (or, for the table, lets it print to the consoles)."""

from __future__ import annotations

from ._common import back_home, emit
from ._consoles import stderr, stdout


def write(fmt: str, output) -> None:
    from ..formats import render

    back_home()
    text = render(fmt, output, out=stdout(), err=stderr())
    if text is not None:
        emit(text)


__all__ = ["write"]
