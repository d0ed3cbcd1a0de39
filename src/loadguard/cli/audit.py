"""``loadguard audit PATH``: load a model as a user would, audit it, optionally repair it in memory."""

from __future__ import annotations

import click

from ._common import ExitCode, load_model, loading_options, stderr, stdout


@click.command()
@loading_options
@click.option("--repair", "do_repair", is_flag=True, help="Also repair in memory and say whether the result audits clean (never writes to PATH).")
@click.option("--format", "fmt", type=click.Choice(["human", "json"]), default="human", show_default=True)
def audit(path, trust_remote_code, auto_class, dtype, device, poison, do_repair, fmt):
    """Load PATH with from_pretrained and report every tensor that is not what its code and checkpoint define.

    Exit code 0: the model as loaded is clean; 1: findings; 2: could not run.
    """
    from .. import audit as run_audit
    from .. import repair as run_repair
    from ..render import next_step, print_report, report_json

    model = load_model(path, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype, device=device, poison=poison)
    report = run_audit(model, path)
    repaired = run_repair(model, report) if do_repair and not report.ok else None
    if fmt == "json":
        click.echo(report_json(report, repaired))
    else:
        print_report(stdout(), report, repaired)
        hint = next_step(report, repaired)
        if hint:
            stderr().print(f"[bold]Hint:[/] {hint}", highlight=False)
    return ExitCode.CLEAN if report.ok else ExitCode.FINDINGS
