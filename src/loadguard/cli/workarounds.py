"""``loadguard workarounds list [PATH]``: the registry, and for a model whether each one is needed."""

from __future__ import annotations

import json
from collections import Counter

import click

from .. import _files
from .._infra import styled
from ..report import WorkaroundStatus
from ._common import ExitCode, emit, load_model
from ._consoles import stderr, stdout
from ._options import SuggestingGroup, format_option, workaround_option, workarounds_from_option


def _status(item, model, report, runner) -> str:
    """needed / stale / not applicable, measured on the loaded model."""

    config = _files.config_dict(model.config)
    if not item.applies(config):
        return "not applicable"
    if item.stage == "after_load":
        targets = item.targets(model)
        if not targets:
            return "applies, but finds nothing to fix (the model changed?)"
        broken = sorted({f.tensor for f in report.failures} & set(targets))
        return f"needed: {', '.join(broken)} broken" if broken else f"stale: {', '.join(targets)} already correct"
    if item.stage == "runner":
        return WorkaroundStatus.NEEDED if item.needed is None or item.needed(runner) else WorkaroundStatus.STALE
    from .. import workarounds as registry

    return registry.judge_before_import(item, registry.model_code(getattr(model.config, "_name_or_path", None)))


@click.group(cls=SuggestingGroup)
def workarounds():
    """Registered workarounds: what they fix, where upstream tracks it, and whether a model needs them."""


@workarounds.command("list")
@click.argument("path", required=False)
@click.option("--trust-remote-code", is_flag=True, help="Needed to load PATH if it has its own code.")
@workaround_option("Load PATH with these", dest="selection")
@workarounds_from_option()
@format_option("json")
def list_workarounds(path, trust_remote_code, selection, fmt):
    """List every registered workaround, where it comes from and the failures it fixes; with PATH, load it
    (under poison) and say whether each is needed."""
    from rich.table import Table

    from .. import workarounds as registry
    from .._audit import audit
    from ..runner import HfRunner

    items = registry.all_workarounds()
    statuses: dict[str, str] = {}
    if path:
        model, early = load_model(
            path,
            trust_remote_code=trust_remote_code,
            auto_class=None,
            dtype="auto",
            device="cpu",
            poison=True,
            workarounds=selection,
        )
        report = audit(model, path)
        runner = HfRunner.from_model(model, auto_workarounds=False)
        statuses = {item.name: _status(item, model, report, runner) for item in items}
        for outcome in early:  # before_import: what this load did with them
            word = {
                WorkaroundStatus.APPLIED: WorkaroundStatus.NEEDED,
                WorkaroundStatus.NOT_APPLICABLE: "not applicable",
            }.get(outcome.status, outcome.status)
            statuses[outcome.name] = f"{word}: " + (outcome.detail or WorkaroundStatus.APPLIED)
    rows = [
        {
            "name": w.name,
            "stage": w.stage,
            "source": w.source,
            "applies_to": w.applies_to_text,
            "fixes": [f"{s.exception}: {s.pattern}" for s in w.fixes],
            "reason": w.reason,
            "upstream": w.upstream,
            "status": statuses.get(w.name),
        }
        for w in items
    ]
    broken = registry.external_errors()
    if fmt == "json":
        emit(json.dumps({"model": path, "workarounds": rows, "entry_point_errors": broken}, indent=2))
        return ExitCode.CLEAN
    for entry_point, why in sorted(broken.items()):
        stderr().print(
            styled("[bold]Warning:[/] workaround entry point {} could not be imported: {}", entry_point, why),
            highlight=False,
        )
    table = Table(header_style="bold")
    columns = ["name", "stage", "source", "reason", "upstream"] + (["status"] if path else [])
    for column in columns:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(str(row[c]) for c in columns))
    stdout().print(table)
    return ExitCode.CLEAN


@workarounds.command("coverage")
@format_option("json")
def coverage(fmt):
    """How the API diff (transformers 4.57 -> the pinned 5.x, `make api-diff`) is covered: per workaround, the entries
    it gives back; how many are declined, with the reasons; any entry nobody covers. Exit 1 if one is uncovered."""

    from ..workarounds import api_coverage, v4_names

    tally = api_coverage.tally()
    reasons = Counter(
        what
        for e in v4_names.diff()["entries"]
        for state, what in [api_coverage.coverage(e["id"])]
        if state == "declined"
    )
    if fmt == "json":
        emit(json.dumps({**tally, "declined_reasons": dict(reasons)}, indent=2))
    else:
        out = stdout()
        out.print(
            f"API diff transformers {tally['from']} -> {tally['to']}: {tally['entries']} entries", highlight=False
        )
        for name, count in sorted(tally["covered"].items(), key=lambda item: -item[1]):
            out.print(f"  given back by {name}: {count}", highlight=False)
        out.print(f"  declined: {tally['declined']}", highlight=False)
        for reason, count in reasons.most_common():
            out.print(f"    {count:5d}  {reason}", highlight=False)
        for entry in tally["uncovered"]:
            out.print(styled("  [bold red]uncovered[/] {}", entry), highlight=False)
    return ExitCode.FINDINGS if tally["uncovered"] else ExitCode.CLEAN
