"""Output formats: one emitter a module, chosen by :class:`Format`, here and nowhere else.

A command hands its result to :func:`render` as an :class:`Output`: the views every emitter reads (its JSON document,
its Markdown, its :class:`Row` list, its table). ``table`` (:mod:`.table`; ``human`` is its former name) is for a
terminal or a log, ``json`` (:mod:`.jsondoc`) the JSON contract, ``markdown`` (:mod:`.markdown`) a PR comment; the
others are for where findings are acted on: ``sarif`` (a repository's code-scanning tab), ``github`` (workflow
commands: annotations on a PR, and a Markdown summary in ``$GITHUB_STEP_SUMMARY``), ``junit`` (a CI test report).

Example::

    from loadguard.formats import Format, Row, render_rows

    print(render_rows(Format.SARIF, [Row.from_report(report, "./my-model")]))
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol

from ._rows import Row, RunFailure


class Format(str, Enum):
    TABLE = "table"
    JSON = "json"
    MARKDOWN = "markdown"
    SARIF = "sarif"
    GITHUB = "github"
    JUNIT = "junit"

    @classmethod
    def _missing_(cls, value):
        return cls.TABLE if value == "human" else None


EMITTED = (Format.SARIF, Format.GITHUB, Format.JUNIT)
"""The formats that read only a command's :class:`Row` list (:func:`render_rows`)."""


class Output(Protocol):
    """A command's result, as the emitters read it. ``command`` names the run (``audit``, ``scan``, ...)."""

    command: str

    def document(self) -> dict[str, Any] | list[dict[str, Any]]:
        """The JSON: one document, or (a list) one document a line."""
        ...

    def markdown(self) -> str: ...

    def rows(self) -> list[Row]:
        """One row per model (or cell) checked: what sarif, github and junit show."""
        ...

    def table(self, out, err) -> None:
        """Print the table to the ``out`` console, notes and hints to ``err``."""
        ...


def render_rows(fmt: Format | str, rows: list[Row], *, command: str = "audit") -> str:
    """``rows`` as ``fmt`` (one of :data:`EMITTED`); ``command`` names the run (``audit``, ``scan``)."""
    from . import github, junit, sarif

    emitters = {Format.SARIF: sarif.emit, Format.GITHUB: github.emit, Format.JUNIT: junit.emit}
    return emitters[Format(fmt)](rows, command=command)


def render(fmt: Format | str, output: Output, *, out=None, err=None) -> str | None:
    """``output`` as ``fmt``: the text to write to stdout, or, for ``table``, None once it is printed to ``out``/``err``."""
    from . import jsondoc, markdown, table

    fmt = Format(fmt)
    if fmt in EMITTED:
        return render_rows(fmt, output.rows(), command=output.command)
    emitters = {
        Format.TABLE: lambda o: table.emit(o, out, err),
        Format.JSON: jsondoc.emit,
        Format.MARKDOWN: markdown.emit,
    }
    return emitters[fmt](output)


__all__ = ["EMITTED", "Format", "Output", "Row", "RunFailure", "render", "render_rows"]
