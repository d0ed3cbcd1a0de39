"""The commands that run one model's code (audit, compare, trace) run it in a child forked for it
(:mod:`loadguard._infra.forks`), never in the ``loadguard`` process: what the model's code starts, ignores or changes
ends with the child. ``--timeout`` and ``--memory-limit`` stop that child past their limit, and the parent says which
limit stopped it. Neither given: no limit (as a plain ``from_pretrained`` has none). Where ``os.fork`` does not exist,
the command runs in this process and the limits are refused."""

from __future__ import annotations

import functools
import io
import os
import sys

import click

from .._infra import parse_size
from ..errors import InvalidOptionError, LoadguardError
from ._common import ExitCode, streams_replaced, streams_without_descriptor
from ._consoles import SETTINGS, stderr
from ._ending import said, threads_left, warnings_kept


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


class _Relay(io.StringIO):
    """In the child: what it writes to a stream of the parent's that has no descriptor, kept to be written there."""

    encoding = "utf-8"


def _in_child(call, relayed: dict[int, object]):
    """The child: the command, ended as the CLI ends one (its errors as Error and Hint, its warnings kept back, the
    threads the model's code left said); its exit code and the text of each relayed stream come back."""
    buffers = {key: _Relay() for key in relayed}
    streams_replaced(buffers)
    debug = os.environ.get("LOADGUARD_DEBUG", "") not in ("", "0")
    try:
        with warnings_kept(SETTINGS["verbose"]):
            code = call()
    except Exception as error:  # noqa: BLE001  (as the CLI's main says it: never a bare traceback)
        code = said(error, debug)
    threads_left()  # they end with this child
    sys.stdout.flush()
    sys.stderr.flush()
    code = int(code if code is not None else ExitCode.CLEAN)
    return code, {key: buffer.getvalue() for key, buffer in buffers.items()}


def in_a_child(call, timeout: float | None, limit: int | None, what: str, unfinished=None):
    """``call()``, the part of a command that runs a model's code, in a child forked for it (its own process group,
    killed with all it started past ``timeout`` seconds or ``limit`` bytes, or when this process is told to stop), so
    nothing the model's code starts, ignores or changes (processes, threads, signal dispositions, the working folder)
    reaches the ``loadguard`` process. Output on a descriptor is the child's own (inherited: streamed, a terminal stays
    one); output to a stream without one is relayed when the child ends. ``unfinished(error)``, when given, writes what
    the command writes for a model it could not check (a machine format's document). Its exit code."""
    from .._infra import forks

    relayed = streams_without_descriptor()
    sys.stdout.flush()
    sys.stderr.flush()
    (outcome,) = forks.run(
        lambda _: _in_child(call, relayed),
        [None],
        timeout=timeout,
        memory_limit=limit,
        keep_threads=bool(SETTINGS.get("command")),  # this process ran no torch op: the child may use every core
    )
    if outcome.ok:
        code, texts = outcome.value
        for key, text in texts.items():
            relayed[key].write(text)
            relayed[key].flush()
    if outcome.left_behind:
        stderr().print(
            f"loadguard: stopped {outcome.left_behind} process(es) the model's code left running", highlight=False
        )
    if outcome.ok:
        return code
    error = did_not_finish(f"{what}: the command", outcome, "run it again with LOADGUARD_DEBUG=1 to see why")
    if unfinished is not None:
        unfinished(error)
    raise error


def _not_in_a_child() -> tuple[str, str] | None:
    """Why the command must run the model's code in this process, with the hint for the limits that need a child;
    None where a child is possible. No ``os.fork`` (not Linux/macOS); or a call from Python after CUDA work (the
    ``loadguard`` command never has started it), whose CUDA a forked child could not use."""
    from .._infra import forks

    if not forks.available():
        return "--timeout and --memory-limit need os.fork, which this system lacks", "leave them out"
    torch = sys.modules.get("torch")
    try:
        cuda = bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001  (a torch without CUDA support answers no)
        cuda = False
    if cuda:
        return (
            "--timeout and --memory-limit run the model in a forked child, which cannot use CUDA once this process "
            "has started it",
            "call loadguard.cli.main before any CUDA work, or run the `loadguard` command",
        )
    return None


def limits_options(command=None, *, unfinished=None):
    """Adds ``--timeout SECONDS`` and ``--memory-limit SIZE`` to a command that runs one model's code, and runs that
    code in a child of its own (:func:`in_a_child`) wherever ``os.fork`` exists. ``unfinished(kwargs, error)``: what the
    command writes for a model whose child did not finish."""
    if command is None:
        return functools.partial(limits_options, unfinished=unfinished)

    @functools.wraps(command)
    def limited(*args, timeout=None, memory=None, **kwargs):
        limit = memory_limit(memory, 1, fleet=False) if memory else None
        refused = _not_in_a_child()
        if refused is not None:  # in this process, as from_pretrained runs: no limit can hold here
            if timeout is not None or limit is not None:
                raise InvalidOptionError(*refused)
            return command(*args, **kwargs)
        return in_a_child(
            lambda: command(*args, **kwargs),
            timeout,
            limit,
            str(kwargs.get("path", "the model")),
            (lambda error: unfinished(kwargs, error)) if unfinished else None,
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


__all__ = ["did_not_finish", "in_a_child", "limits_options", "memory_limit", "memory_limit_option"]
