"""A fleet's progress bar on stderr."""

from __future__ import annotations

import contextlib

from ._consoles import SETTINGS, stderr


@contextlib.contextmanager
def fleet_progress(total: int):
    """A progress bar on stderr for a fleet of ``total`` models, when stderr is a terminal and not ``--quiet`` (a CI
    log gets none); yields ``advance(index, outcome)`` for :func:`loadguard._infra.forks.run`'s ``on_done``."""
    console = stderr()
    if SETTINGS["quiet"] or not console.is_terminal or total < 2:
        yield lambda index, outcome: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("scanning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task("models", total=total)
        yield lambda index, outcome: bar.advance(task)
