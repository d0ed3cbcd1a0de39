"""``loadguard selfcheck``: prove the scan on the transformers installed here (scan equals a full audit)."""

from __future__ import annotations

import json

import click

from .._infra import Markup
from ._common import ExitCode, emit, progress, quiet_transformers
from ._consoles import stdout
from ._options import format_option


def _verdict(failing: dict[str, str]) -> str:
    from .._infra import collapse_names

    return ", ".join(collapse_names(f"{tensor} ({status})" for tensor, status in sorted(failing.items()))) or "clean"


@click.command()
@format_option("json")
@click.option(
    "--cached",
    is_flag=True,
    help="Show the record of this combination when there is one, instead of running it again.",
)
def selfcheck(fmt, cached):
    """Run the scan's self-check now and record it: tiny zoo models, one per failure mode, each scanned without
    weights and audited after a full load; the two verdicts must agree tensor for tensor.

    A scan runs this by itself the first time it meets a transformers version (and refuses if it fails).
    Exit 0: they agree on every model; 1: they differ (scans refuse here); 2: it could not run.
    """
    from rich.table import Table

    from .._infra import collapse_names
    from .._scan import selfcheck as check

    quiet_transformers()
    result = check.recorded() if cached else None
    if result is None:
        with progress("Running the scan's self-check"):
            from .._scan import scan

            result = check.run(scan)
    if fmt == "json":
        emit(
            json.dumps(
                {**result.to_dict(), "record": str(check.record_path()), "proven": check.proven_versions()}, indent=2
            )
        )
    else:
        out = stdout()
        table = Table(
            header_style="bold", title=f"scan self-check: transformers {result.transformers}, torch {result.torch}"
        )
        for column in ("model", "covers", "scan predicts", "full audit finds", "agree"):
            table.add_column(column, overflow="fold", ratio=1 if column in ("covers", "scan predicts") else None)
        for case in result.cases:
            if case.skipped:
                table.add_row(case.entry, case.covers, case.skipped, "the same", Markup("[yellow]skipped[/]"))
                continue
            audited = "" if case.error else ("the same" if case.agree else _verdict(case.audited))
            table.add_row(
                case.entry,
                case.covers,
                case.error or _verdict(case.predicted),
                audited,
                Markup("[green]yes[/]" if case.agree else "[bold red]NO[/]"),
            )
        out.print(table)
        for case in result.cases:
            if case.invisible:
                out.print(
                    f"{case.entry}: {len(case.invisible)} predicted constant fill(s) onto tensors its checkpoint holds as that very "
                    f"constant (no value comparison can see those writes): {', '.join(collapse_names(case.invisible))}",
                    highlight=False,
                )
        verdict = Markup(
            "[bold green]passed[/]" if result.ok else "[bold red]FAILED[/]: scans refuse on this transformers"
        )
        when = f" (recorded {result.ran_at})" if result.cached else ""
        out.print(f"{verdict} in {result.seconds:.1f} s{when}; record: {check.record_path()}", highlight=False)
        out.print(f"proven here: {', '.join(check.proven_versions()) or 'none'}", highlight=False)
    return ExitCode.CLEAN if result.ok else ExitCode.FINDINGS
