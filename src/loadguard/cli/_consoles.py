"""The two consoles every human-facing line goes through (stdout: results; stderr: notes, Error/Hint, progress), and
the global options that shape them."""

from __future__ import annotations

import functools
import sys
from typing import Any

from rich.console import Console

from .._infra import Markup, unlinked, visible

NON_TTY_WIDTH = 100_000
"""What a table may take when stdout is a log or a pipe: all it needs, so no cell folds and no row wraps."""


SETTINGS: dict[str, Any] = {"verbose": False, "quiet": False, "color": "auto"}
"""The global options (``--verbose``, ``--quiet``, ``--color``), set once before a command runs."""


def _colors() -> dict[str, Any]:
    """``--color auto`` lets rich decide (a terminal gets color unless ``NO_COLOR`` is set); ``always`` / ``never``."""
    return {"always": {"force_terminal": True}, "never": {"no_color": True, "color_system": None}}.get(
        SETTINGS["color"], {}
    )


class SafeConsole(Console):
    """The edge every human-facing line goes through (tables, Error/Hint, notes, progress): each string rendered is
    shown with its control characters escaped (:func:`loadguard._infra.text.visible`: ``\\x1b``, ``\\n``), so no name,
    config value or message a model controls can move the cursor, retitle or clear a terminal, or start a line (a GitHub
    workflow command, a forged ``Error:``); and no link escape sequence (OSC 8) is written. A line of our own is one
    ``print``: several lines are several prints. Style tags are read only in :class:`loadguard._infra.text.Markup` (see
    :func:`loadguard._infra.text.styled`): a model's ``[red]`` or a help's ``[default: table]`` is shown as written."""

    def render_str(self, text: str, **kwargs):

        kwargs["markup"] = isinstance(
            text, Markup
        )  # tags are read in our own markup only: any other text is shown as written
        return unlinked(super().render_str(visible(text), **kwargs))


@functools.cache
def stdout() -> Console:
    console = SafeConsole(soft_wrap=False, **_colors())
    if not sys.stdout.isatty():  # logs and pipes: nothing wraps, a table keeps one row a line however long
        console = SafeConsole(soft_wrap=True, width=NON_TTY_WIDTH, **_colors())
    return console


@functools.cache
def stderr() -> Console:
    return SafeConsole(stderr=True, soft_wrap=True, **_colors())


__all__ = ["NON_TTY_WIDTH", "SETTINGS", "SafeConsole", "stderr", "stdout"]
