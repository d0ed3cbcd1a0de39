"""Options several commands share and that are not about loading a model: ``--format``, ``--workarounds-from``."""

from __future__ import annotations

import functools

import click


class SuggestingGroup(click.Group):
    """A command group that answers a mistyped subcommand with the closest one ("did you mean")."""

    def resolve_command(self, ctx, args):
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1, cutoff=0.6)
            ctx.fail(
                f"no such command {name!r}."
                + (f" Did you mean {close[0]!r}?" if close else f" Commands: {', '.join(self.list_commands(ctx))}.")
            )
        return super().resolve_command(ctx, args)


def format_option(*formats: str, help: str | None = None):
    """``--format``: ``table`` (the default; ``human``, its former name, still accepted) and ``formats``."""

    def as_table(ctx, param, value):
        return "table" if value == "human" else value

    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "human", *formats]),
        default="table",
        show_default=True,
        callback=as_table,
        help=help,
    )


AUTO, NONE = "auto", "none"
WORKAROUND_RULE = (
    "default: auto (every workaround whose failure the load meets, applied and reported); "
    "'--workaround none' loads exactly as plain transformers does"
)
"""One rule for every command that loads a model (audit, scan, compare, trace, fix, matrix, workarounds list)."""


def _chosen_workarounds(ctx, param, value) -> tuple[str, ...]:
    names = tuple(value or ())
    if not names:
        return (AUTO,)
    if NONE in names:
        if len(names) > 1:
            raise click.BadParameter(
                f"'{NONE}' loads with no workaround: it does not go with {', '.join(n for n in names if n != NONE)}"
            )
        return ()
    return names


def workaround_option(what: str, dest: str = "workarounds"):
    """``--workaround NAME`` (repeatable), the same rule in every command: without it, ``auto``; ``none``: nothing."""
    return click.option(
        "--workaround",
        dest,
        multiple=True,
        metavar="NAME",
        callback=_chosen_workarounds,
        help=f"{what} (repeatable; `loadguard workarounds list`); {WORKAROUND_RULE}.",
    )


def workarounds_from_option(expose: bool = False):
    """``--workarounds-from FILE.py`` (repeatable): workarounds registered outside the package. The files are imported
    when the command runs, before its body: never for ``--help`` or a usage error (an option that executes code acts
    only when the command does), and before ``--workaround NAME`` is resolved, so it can name them."""

    def decorate(command):
        @functools.wraps(command)
        def with_files(*args, **kwargs):
            from .. import workarounds as registry

            files = kwargs["workarounds_from"] if expose else kwargs.pop("workarounds_from")
            for file in files or ():
                registry.load_file(file)
            return command(*args, **kwargs)

        return click.option(
            "--workarounds-from",
            "workarounds_from",
            multiple=True,
            metavar="FILE.py",
            help="Import a Python file that registers workarounds with @loadguard.workaround (repeatable).",
        )(with_files)

    return decorate


def executor_option(command):
    """``--executor local|ray[:ADDRESS]``: where a fleet's models (a matrix's cells, a native sweep's classes) run."""

    def resolved(ctx, param, value):
        from ..executors import resolve

        return resolve(value)

    return click.option(
        "--executor",
        default="local",
        show_default=True,
        metavar="local|ray[:ADDRESS]",
        callback=resolved,
        help="Where each model runs: forked children here, or tasks on a Ray cluster (ray: $RAY_ADDRESS or a new local "
        "cluster; ray:auto: the one this machine is in; ray:HOST:PORT). The same rows either way. Needs loadguard[ray].",
    )(command)
