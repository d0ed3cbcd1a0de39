"""How a command ends, the same whether it ran in the ``loadguard`` process or in the child that runs a model's code
for it (:mod:`loadguard.cli._limits`): the warnings kept back, an error as one Error and one Hint, and the threads the
model's code left running."""

from __future__ import annotations

import contextlib
import threading
import traceback
import warnings

import click

from .._infra import Markup, import_failure, styled
from ..errors import LoadguardError, LoadguardWarning
from ._common import ExitCode, note, report_error
from ._consoles import stderr


@contextlib.contextmanager
def warnings_kept(verbose: bool):
    """Python warnings (deprecations in transformers, the model's code) off the screen unless ``--verbose``; one line
    on stderr says how many were kept back. loadguard's own warnings always show."""
    if verbose:
        yield
        return

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        yield  # a command that fails says one Error and one Hint: the count below is for a command that ran
        hidden = [w for w in caught if not issubclass(w.category, LoadguardWarning)]
        for kept in (w for w in caught if issubclass(w.category, LoadguardWarning)):
            stderr().print(f"Warning: {kept.message}", highlight=False)
        if hidden:
            note(f"({len(hidden)} warning(s) from transformers or the model's code not shown: --verbose shows them)")


def said(error: Exception, debug: bool) -> int:
    """An error that ended a command, as the CLI says it (``Error:`` and ``Hint:`` on stderr, the traceback with
    ``LOADGUARD_DEBUG=1``): the exit code, always 2."""
    if debug:
        traceback.print_exc()
    if not isinstance(error, (LoadguardError, click.ClickException)):
        error = import_failure(error) or error  # an environment that cannot import transformers: named as such
    if isinstance(error, LoadguardError):
        report_error(error)
    elif isinstance(error, click.ClickException):
        stderr().print(styled("[bold red]Error:[/] {}", error.format_message()), highlight=False)
        command = error.ctx.command_path if getattr(error, "ctx", None) else "loadguard"
        stderr().print(styled("[bold]Hint:[/] for the options, run: {} --help", command), highlight=False)
    else:  # never a bare traceback
        stderr().print(styled("[bold red]Error:[/] unexpected {}: {}", type(error).__name__, error), highlight=False)
        stderr().print(
            Markup("[bold]Hint:[/] set LOADGUARD_DEBUG=1 to see the traceback, and report it"), highlight=False
        )
    return ExitCode.COULD_NOT_RUN


def threads_left() -> int:
    """Non-daemon threads other than this one still running (the model's code started them): each would keep the
    interpreter alive after the report. Said on stderr when there are any; their number."""
    lingering = [
        t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon and t.is_alive()
    ]
    if lingering:
        stderr().print(
            f"loadguard: ended with {len(lingering)} thread(s) the model's code started still running", highlight=False
        )
    return len(lingering)


__all__ = ["said", "threads_left", "warnings_kept"]
