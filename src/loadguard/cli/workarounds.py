"""``loadguard workarounds list [PATH]``: the registry, and for a model whether each one is needed."""

from __future__ import annotations

import json

import click

from ._common import ExitCode, load_model, stdout


def _status(item, model, report, runner) -> str:
    """needed / stale / not applicable, measured on the loaded model."""
    config = model.config.to_dict()
    if not item.applies(config):
        return "not applicable"
    if item.stage == "after_load":
        targets = item.targets(model)
        if not targets:
            return "applies, but finds nothing to fix (the model changed?)"
        broken = sorted({f.tensor for f in report.failures} & set(targets))
        return f"needed: {', '.join(broken)} broken" if broken else f"stale: {', '.join(targets)} already correct"
    if item.stage == "runner":
        return "needed" if item.needed is None or item.needed(runner) else "stale"
    return "applies (before import: shown when used with --workaround)"


@click.group()
def workarounds():
    """Registered workarounds: what they fix, where upstream tracks it, and whether a model needs them."""


@workarounds.command("list")
@click.argument("path", required=False)
@click.option("--trust-remote-code", is_flag=True, help="Needed to load PATH if it has its own code.")
@click.option("--format", "fmt", type=click.Choice(["human", "json"]), default="human", show_default=True)
def list_workarounds(path, trust_remote_code, fmt):
    """List every registered workaround; with PATH, load it (under poison) and say whether each is needed."""
    from rich.table import Table

    from .. import audit
    from .. import workarounds as registry
    from ..runner import HfRunner

    items = registry.all_workarounds()
    statuses: dict[str, str] = {}
    if path:
        model, _ = load_model(path, trust_remote_code=trust_remote_code, auto_class=None, dtype="auto", device="cpu", poison=True)
        report = audit(model, path)
        runner = HfRunner.from_model(model, auto_workarounds=False)
        statuses = {item.name: _status(item, model, report, runner) for item in items}
    rows = [
        {"name": w.name, "stage": w.stage, "applies_to": w.applies_to_text, "reason": w.reason, "upstream": w.upstream, "status": statuses.get(w.name)}
        for w in items
    ]
    if fmt == "json":
        click.echo(json.dumps({"model": path, "workarounds": rows}, indent=2))
        return ExitCode.CLEAN
    table = Table(header_style="bold")
    columns = ["name", "stage", "applies_to", "reason", "upstream"] + (["status"] if path else [])
    for column in columns:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(str(row[c]) for c in columns))
    stdout().print(table)
    return ExitCode.CLEAN
