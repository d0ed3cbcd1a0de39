"""``--timeout`` and ``--memory-limit`` for the commands that run one model's code in this process (audit, compare,
trace): given either, the command's work runs in a child forked for it (:mod:`loadguard._infra.forks`), which is killed past
the limit; the child prints its own output, the parent says which limit stopped it. Neither given: no child, no limit
(the default, as a plain ``from_pretrained`` has none)."""

from __future__ import annotations

import functools
import os
import sys

import click

from .._infra import parse_size
from ..errors import InvalidOptionError, LoadguardError
from ._common import ExitCode, report_error


def memory_limit(text: str, jobs: int, fleet: bool) -> int | None:
    """``--memory-limit``: bytes one model's scan may add to the process it is forked from. ``auto``: in a fleet, 80% of
    this machine's memory shared among the ``jobs`` running at once (a fleet never swaps the machine to death); one
    model, in this process: none. ``none``: no limit."""
    from .._infra import resident

    value = text.strip().lower()
    if value == "none":
        return None
    measurable = resident() is not None  # a child's resident memory is read from /proc (Linux)
    if value == "auto":
        if not fleet or not measurable or not hasattr(os, "sysconf"):
            return None
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            return None
        return int(total * 0.8 / max(1, jobs))

    size = parse_size(text)
    if size is None:
        raise InvalidOptionError(
            f"--memory-limit {text!r} is not a size", "e.g. --memory-limit 4GB (or 2G, 2GiB, 2048M; auto; none)"
        )
    if not measurable:
        raise InvalidOptionError(
            "--memory-limit needs /proc to read a scan's memory, which this system lacks",
            "leave it out (--memory-limit none)",
        )
    return size


def did_not_finish(what: str, outcome, otherwise: str) -> LoadguardError:
    """The error for a child that ended without its result: which limit stopped it (and to raise it), else
    ``otherwise``."""
    which = {"memory": "--memory-limit", "timeout": "--timeout"}.get(outcome.killed)
    return LoadguardError(
        f"{what} did not finish: {outcome.error}",
        f"raise {which} if the model only needs more" if which else otherwise,
    )


def memory_limit_option(help: str):
    """``--memory-limit SIZE|auto|none`` (default auto) for a command that runs models in children of its own."""
    return click.option(
        "--memory-limit", "memory", default="auto", show_default=True, metavar="SIZE|auto|none", help=help
    )


def _body(call):
    """In the child: the command, its own errors printed as the CLI prints them; the exit code comes back."""

    try:
        code = call()
    except LoadguardError as error:
        report_error(error)
        code = ExitCode.COULD_NOT_RUN
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return int(code if code is not None else ExitCode.CLEAN)


def limits_options(command):
    """Adds ``--timeout SECONDS`` and ``--memory-limit SIZE`` to a command that runs one model's code."""

    @functools.wraps(command)
    def limited(*args, timeout=None, memory=None, **kwargs):
        from .._infra import forks

        limit = memory_limit(memory, 1, fleet=False) if memory else None
        if timeout is None and limit is None:
            return command(*args, **kwargs)
        if not forks.available():
            raise InvalidOptionError(
                "--timeout and --memory-limit need os.fork, which this system lacks", "leave them out"
            )
        import transformers  # noqa: F401  (imported here, once, not in the child)

        (outcome,) = forks.run(
            lambda _: _body(lambda: command(*args, **kwargs)), [None], timeout=timeout, memory_limit=limit
        )
        if outcome.ok:
            return outcome.value
        raise did_not_finish(
            f"{kwargs.get('path', 'the model')}: the command",
            outcome,
            "run it again with LOADGUARD_DEBUG=1 to see why",
        )

    limited = click.option(
        "--memory-limit",
        "memory",
        default=None,
        metavar="SIZE",
        help="Memory the model's load and run may add (e.g. 8GB); past it, the command is stopped and says so. Default: none.",
    )(limited)
    return click.option(
        "--timeout",
        type=click.FloatRange(1, None),
        default=None,
        metavar="SECONDS",
        help="Seconds the model's load and run may take; past it, the command is stopped and says so. Default: none.",
    )(limited)


__all__ = ["did_not_finish", "limits_options", "memory_limit", "memory_limit_option"]
