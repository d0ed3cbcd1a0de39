"""Output formats: one emitter a module, chosen by :class:`Format`, over one list of :class:`Row` (a model's result).

``table`` (``human`` is its former name) and ``json`` are each command's own (a table, the JSON contract); the formats
here are for where findings are acted on: ``sarif`` (a repository's code-scanning tab), ``github`` (workflow commands:
annotations on a PR, and a Markdown summary in ``$GITHUB_STEP_SUMMARY``), ``junit`` (a CI test report).

Example::

    from loadguard.formats import Format, Row, render

    print(render(Format.SARIF, [Row.from_report(report, "./my-model")]))
"""

from __future__ import annotations

from enum import Enum

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
"""The formats :func:`render` writes; the others are each command's own."""


def render(fmt: Format | str, rows: list[Row], *, command: str = "audit") -> str:
    """``rows`` as ``fmt`` (one of :data:`EMITTED`); ``command`` names the run (``audit``, ``scan``)."""
    from . import github, junit, sarif

    emitters = {Format.SARIF: sarif.emit, Format.GITHUB: github.emit, Format.JUNIT: junit.emit}
    return emitters[Format(fmt)](rows, command=command)


__all__ = ["EMITTED", "Format", "Row", "RunFailure", "render"]
