"""``loadguard config``: the configuration in effect here, and where each value comes from."""

from __future__ import annotations

import json

import click

from .._infra import settings
from ._common import emit
from ._consoles import stdout
from ._options import format_option


@click.command()
@format_option("json")
def config(fmt):
    """Print the effective [tool.loadguard] configuration (the nearest pyproject.toml that has the table), each value with
    where it came from. Command-line flags override every value."""

    project = settings.load()
    rows = [
        {"key": key, "value": project.get(key), "source": project.origin(key), "sets": settings.KEYS[key][2]}
        for key in settings.KEYS
    ]
    if fmt == "json":
        emit(json.dumps({"file": str(project.source) if project.source else None, "settings": rows}, indent=2))
        return 0
    from rich.table import Table

    table = Table(
        header_style="bold",
        title=f"loadguard configuration ({project.source or 'no [tool.loadguard] table found: defaults'})",
    )
    for column in ("key", "value", "from", "sets"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["key"], json.dumps(row["value"]), row["source"], row["sets"])
    stdout().print(table)
    return 0
