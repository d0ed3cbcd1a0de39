"""``loadguard audit PATH``: load a model as a user would, audit it, optionally repair it in memory."""

from __future__ import annotations

import click

from ._common import ExitCode, emit, load_model, loading_options, stderr, stdout


@click.command()
@loading_options
@click.option("--repair", "do_repair", is_flag=True, help="Also repair in memory and say whether the result audits clean (never writes to PATH).")
@click.option("--format", "fmt", type=click.Choice(["human", "json"]), default="human", show_default=True)
def audit(path, trust_remote_code, auto_class, dtype, device, poison, workarounds, strict_stale, placement, do_repair, fmt):
    """Load PATH with from_pretrained and report every tensor that is not what its code and checkpoint define.

    Exit code 0: the model as loaded is clean; 1: findings; 2: could not run.
    """
    from .. import repair as run_repair
    from .. import workarounds as registry
    from ..render import next_step, print_report, report_json

    model, early = load_model(
        path, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype, device=device, placement=placement, poison=poison,
        workarounds=workarounds, strict_stale=strict_stale,
    )
    # the model as loaded is what the exit code and `ok` describe
    report, after_workarounds = registry.audit_after_load(model, registry.resolve(workarounds), path, early=early, strict=strict_stale)
    current = after_workarounds or report
    repaired = run_repair(model, current) if do_repair and not current.ok else None
    if fmt == "json":
        extra = {"after_workarounds": None if after_workarounds is None else {"ok": after_workarounds.ok, "findings": [f.to_dict() for f in after_workarounds.findings]}}
        emit(report_json(report, repaired, **extra))
    else:
        print_report(stdout(), report, repaired)
        if after_workarounds is not None:
            stdout().print("after workarounds: " + ("[bold green]clean[/]" if after_workarounds.ok else "[bold red]still broken[/]"))
        hint = next_step(current, repaired)
        if hint:
            stderr().print(f"[bold]Hint:[/] {hint}", highlight=False)
    return ExitCode.CLEAN if report.ok else ExitCode.FINDINGS
