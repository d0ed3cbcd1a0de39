"""``loadguard zoo list`` / ``loadguard zoo build NAME DIR``: the test models, to reproduce every failure."""

from __future__ import annotations

import json

import click

from ._common import ExitCode, emit
from ._consoles import stderr, stdout
from ._options import SuggestingGroup, format_option


@click.group(cls=SuggestingGroup)
def zoo():
    """Test models that break the way real models break."""


@zoo.command("list")
@format_option("json")
def list_entries(fmt):
    """List the zoo's entries and the failure mode each reproduces."""
    from rich.table import Table

    from .. import zoo as zoo_module

    entries = zoo_module.entries()
    if fmt == "json":
        emit(
            json.dumps(
                [
                    {"name": e.name, "failure_mode": e.failure_mode, "summary": e.summary, "auto_class": e.auto_class}
                    for e in entries
                ],
                indent=2,
            )
        )
        return ExitCode.CLEAN
    table = Table(header_style="bold")
    for column in ("name", "mode", "what it reproduces"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(entry.name, entry.failure_mode or "clean", entry.summary)
    stdout().print(table)
    return ExitCode.CLEAN


def _parse_setting(ctx, param, values):
    settings = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        try:
            settings[key] = json.loads(raw)
        except ValueError:
            settings[key] = raw
    return settings


@zoo.command("build")
@click.argument("name")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--seed", type=int, default=None, help="Seed for the weights (default: the zoo's).")
@click.option(
    "--set",
    "settings",
    multiple=True,
    callback=_parse_setting,
    metavar="KEY=VALUE",
    help="Config field, e.g. --set hidden_size=1024 --set num_hidden_layers=24.",
)
def build(name, folder, seed, settings):
    """Write zoo entry NAME as a model folder in FOLDER (new or empty)."""
    from .. import zoo as zoo_module

    kwargs = dict(settings)
    if seed is not None:
        kwargs["seed"] = seed
    path = zoo_module.build(name, folder, **kwargs)
    entry = zoo_module.get(name)
    emit(str(path))
    stderr().print(f"Built {name}: {entry.summary}", highlight=False)
    stderr().print(
        f"Load it with {entry.auto_class}.from_pretrained({str(path)!r}, trust_remote_code=True)", highlight=False
    )
    return ExitCode.CLEAN
