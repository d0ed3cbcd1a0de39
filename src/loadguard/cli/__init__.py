"""The ``loadguard`` command line. One module per command group; data on stdout, messages on stderr.

Exit codes: 0 clean, 1 findings, 2 could not run. ``LOADGUARD_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click

from .._infra import Markup, Terminated, settings, signals_raise, styled
from ..errors import LoadguardError
from ._common import ExitCode, machine_output, pin_directory
from ._consoles import SETTINGS, stderr
from ._ending import said, threads_left, warnings_kept
from ._options import SuggestingGroup


class _LazyGroup(SuggestingGroup):
    """Imports a command's module only when that command runs, so ``loadguard env`` works even when an
    optional dependency of another command is missing."""

    _commands = {
        "audit": ("audit", "audit"),
        "cache": ("cache", "cache"),
        "compare": ("compare", "compare"),
        "config": ("config", "config"),
        "trace": ("trace", "trace"),
        "demo": ("demo", "demo"),
        "env": ("env", "env"),
        "fix": ("fix", "fix"),
        "hook": ("hook", "hook"),
        "matrix": ("matrix", "matrix"),
        "repeat": ("repeat", "repeat"),
        "scan": ("scan", "scan"),
        "selfcheck": ("selfcheck", "selfcheck"),
        "workarounds": ("workarounds", "workarounds"),
        "zoo": ("zoo", "zoo"),
    }

    def list_commands(self, ctx):
        return sorted(self._commands)

    def get_command(self, ctx, name):
        if name not in self._commands:
            return None
        module_name, attribute = self._commands[name]
        module = __import__(f"{__name__}.{module_name}", fromlist=[attribute])
        return getattr(module, attribute)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="loadguard")
@click.option(
    "--verbose",
    is_flag=True,
    help="Show transformers' warnings, progress bars and the Python warnings of the model's code (hidden otherwise; "
    "a finding a warning explains quotes it anyway). Also accepted after the command.",
)
@click.option(
    "--quiet",
    is_flag=True,
    help="Only results, errors and hints: no progress, no notes on stderr. Also accepted after the command.",
)
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="auto: color on a terminal unless NO_COLOR is set. Also accepted after the command.",
)
def cli(verbose: bool, quiet: bool, color: str) -> None:
    """Prove a model came out of loading exactly as its checkpoint and its code define it."""


_GLOBAL_FLAGS = ("--verbose", "--quiet")


def _hoist_globals(arguments: list[str]) -> tuple[list[str], dict]:
    """``loadguard scan X --verbose --color never`` as ``loadguard --verbose --color never scan X``: these options are
    global, accepted anywhere before ``--`` (what follows it, pytest's arguments for ``repeat``, is not ours)."""
    end = arguments.index("--") if "--" in arguments else len(arguments)
    settings: dict = {"verbose": False, "quiet": False, "color": None}
    kept: list[str] = []
    words = iter(arguments[:end])
    for word in words:
        if word in _GLOBAL_FLAGS:
            settings[word[2:]] = True
        elif word == "--color":
            settings["color"] = next(words, "auto")
        elif word.startswith("--color="):
            settings["color"] = word.split("=", 1)[1]
        else:
            kept.append(word)
    front = [flag for flag in _GLOBAL_FLAGS if settings[flag[2:]]] + (
        ["--color", settings["color"]] if settings["color"] else []
    )
    return front + kept + arguments[end:], settings


def _defaults(project) -> dict:
    """click's default_map from ``[tool.loadguard]``: what the table sets, for each command that has the option."""

    if not project.values:
        return {}
    commands, formats = {}, {}
    with click.Context(cli) as ctx:
        for name in cli.list_commands(ctx):
            command = cli.get_command(ctx, name)
            commands[name] = {p.name for p in command.params}
            fmt = next((p for p in command.params if p.name == "fmt"), None)
            formats[name] = tuple(getattr(fmt.type, "choices", ())) if fmt is not None else ()
    return settings.default_map(project, commands, formats)


def _machine_format(arguments: list[str], configured: str = "table") -> bool:
    """``--format json`` / ``--format=markdown`` (or a machine format set in ``[tool.loadguard]`` and not overridden):
    the output is for a machine; stdout must hold only it."""
    given = any(
        a == "--format" or a.startswith("--format=")
        for a in arguments[: arguments.index("--") if "--" in arguments else None]
    )
    if not given and configured in ("json", "markdown", "sarif", "github", "junit"):
        return True
    for index, argument in enumerate(arguments):
        if argument == "--":
            return False
        value = (
            argument.split("=", 1)[1]
            if argument.startswith("--format=")
            else (arguments[index + 1] if argument == "--format" and index + 1 < len(arguments) else None)
        )
        if value in ("json", "markdown", "sarif", "github", "junit"):
            return True
    return False


def _end_by(stop) -> None:
    """After SIGTERM/SIGHUP, every child stopped (the ``finally`` blocks ran): say so, then end by that very signal, as
    a shell and a CI runner expect of a process that was told to stop."""

    stderr().print(
        styled("[bold red]Error:[/] stopped by {}; every process this run started was stopped with it", stop.name),
        highlight=False,
    )
    sys.stderr.flush()
    signal.signal(stop.number, signal.SIG_DFL)
    os.kill(os.getpid(), stop.number)
    sys.exit(128 + stop.number)


def main(argv: list[str] | None = None) -> None:

    try:
        with signals_raise(), _survivors_stopped(argv is None):
            _main(argv)
    except Terminated as stop:
        _end_by(stop)
    except SystemExit as done:
        if argv is None:
            _end_despite_threads(done.code)
        raise


def _end_despite_threads(code) -> None:
    """As the ``loadguard`` command: a non-daemon thread the model's code started would keep the interpreter (and the
    command, and whatever waits on it) alive after the report; the command ends anyway, and says so."""
    if not threads_left():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else ExitCode.COULD_NOT_RUN))


@contextlib.contextmanager
def _survivors_stopped(entry_point: bool):
    """As the ``loadguard`` command (not a call from Python, whose process goes on): processes the model's code started
    in this process and left running (a ``sleep``, a server, one that ran ``setsid`` or double-forked: they are
    re-parented here) are killed before the command ends, so none holds its output open (``| tee`` would wait) or runs
    past it; stderr says how many."""
    from .._infra import procs

    if not entry_point:
        yield
        return
    before = set(procs.descendants())
    procs.adopt_orphans()
    try:
        yield
    finally:
        stopped = procs.sweep(rounds=5, spare=before)
        if stopped:
            stderr().print(f"loadguard: stopped {stopped} process(es) the model's code left running", highlight=False)


def _main(argv: list[str] | None) -> None:
    pin_directory()
    debug = os.environ.get("LOADGUARD_DEBUG", "") not in ("", "0")
    arguments, flags = _hoist_globals(list(sys.argv[1:] if argv is None else argv))
    verbose = flags["verbose"]
    try:
        from .._infra import settings

        project = settings.load()  # [tool.loadguard]: defaults; the command line overrides them
        flags["color"] = flags["color"] or project.get("color")
        SETTINGS.update(flags if flags["color"] in ("auto", "always", "never") else {**flags, "color": "auto"})
        SETTINGS["command"] = argv is None  # the `loadguard` process itself, which runs no torch op of its own
        with machine_output(_machine_format(arguments, project.get("format"))), warnings_kept(verbose):
            code = cli.main(
                args=arguments, prog_name="loadguard", standalone_mode=False, default_map=_defaults(project)
            )
    except LoadguardError as error:
        sys.exit(said(error, debug))
    except click.exceptions.Abort:  # Ctrl-C: the children were stopped on the way out
        from .._infra import procs

        left = len(procs.descendants())  # said only when checked: none is left
        stderr().print(
            Markup(
                "[bold red]Error:[/] interrupted; every process this run started was stopped with it"
                if not left
                else f"[bold red]Error:[/] interrupted; {left} process(es) this run started are still running"
            ),
            highlight=False,
        )
        sys.exit(ExitCode.COULD_NOT_RUN)
    except click.exceptions.NoArgsIsHelpError as error:  # `loadguard`, `loadguard zoo`: the help, as --help shows it
        click.echo(error.ctx.get_help())
        sys.exit(ExitCode.CLEAN)
    except (click.ClickException, Exception) as error:  # never a bare traceback
        sys.exit(said(error, debug))
    sys.exit(code if isinstance(code, int) else ExitCode.CLEAN)
