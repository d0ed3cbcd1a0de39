"""``loadguard audit PATH``: load a model as a user would, audit it, optionally repair it in memory."""

from __future__ import annotations

import dataclasses
import json

import click

from ._baseline import apply_baseline, baseline_options
from ._limits import limits_options
from ._common import ExitCode, SCHEMA_VERSION, emit, load_model, loading_options, stderr, stdout
from ._options import format_option


@click.command()
@limits_options
@loading_options
@click.option("--repair", "do_repair", is_flag=True, help="Also repair in memory and say whether the result audits clean (never writes to PATH).")
@format_option("json", "sarif", "github", "junit", help="sarif: code scanning; github: workflow annotations (+ $GITHUB_STEP_SUMMARY); junit: a CI test report.")
@click.option("--reproducer", "reproducer_dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Write a standalone script per kind of finding (torch + transformers only) that exits 1 while it is wrong: "
                   "to attach to an upstream issue.")
@baseline_options
@click.option("--timings", is_flag=True, help="JSON: add the seconds each stage took (left out otherwise, so two runs print the same document).")
def audit(path, trust_remote_code, auto_class, dtype, device, poison, workarounds, strict_stale, placement, do_repair, fmt, reproducer_dir, baseline_file, write_baseline, timings):
    """Load PATH with from_pretrained and report every tensor that is not what its code and checkpoint define.

    Exit code 0: the model as loaded is clean; 1: findings; 2: could not run.
    """
    from .. import repair as run_repair
    from .. import workarounds as registry
    from ..errors import LoadguardError, hint_for
    from ..formats import EMITTED, Row, render
    from ..render import next_step, print_report, report_json

    try:
        model, early = load_model(
            path, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype, device=device, placement=placement, poison=poison,
            workarounds=workarounds, strict_stale=strict_stale,
        )
    except LoadguardError as error:  # a machine format still gets its document: this model, not checked, and why
        if fmt == "json":
            emit(json.dumps({"schema_version": SCHEMA_VERSION, "model": str(path), "ok": False, "findings": [],
                             "error": {"kind": type(error).__name__, "message": error.message, "hint": hint_for(error, "cli"),
                                       "fixes": list(error.fixes)}}, indent=2))
        elif fmt in EMITTED:
            emit(render(fmt, [Row.failed(str(path), error.message, hint_for(error, "cli"))], command="audit"))
        raise
    # the model as loaded is what the exit code and `ok` describe
    report, after_workarounds = registry.audit_after_load(model, registry.resolve(workarounds), path, early=early, strict=strict_stale)
    rows = apply_baseline([Row.from_report(report, str(path))], baseline_file, write_baseline)
    if rows is None:
        return ExitCode.CLEAN
    report = dataclasses.replace(report, findings=rows[0].findings)  # known findings (a baseline) are neither shown nor failing
    current = after_workarounds or report
    repaired = run_repair(model, current) if do_repair and not current.ok else None
    if reproducer_dir and not report.ok:
        _write_reproducers(report, reproducer_dir, path, auto_class, trust_remote_code, dtype, placement, early)
    if fmt == "json":
        extra = {"after_workarounds": None if after_workarounds is None else {"ok": after_workarounds.ok, "findings": [f.to_dict() for f in after_workarounds.findings]}}
        document = json.loads(report_json(report, repaired, schema_version=SCHEMA_VERSION, error=None, **extra))
        if not timings:
            document.pop("seconds", None)
        emit(json.dumps(document, indent=2))
    elif fmt in EMITTED:
        emit(render(fmt, [Row.from_report(report, str(path))], command="audit"))
    else:
        print_report(stdout(), report, repaired)
        if after_workarounds is not None:
            stdout().print("after workarounds: " + ("[bold green]clean[/]" if after_workarounds.ok else "[bold red]still broken[/]"))
        hint = next_step(current, repaired)
        if hint:
            stderr().print(f"[bold]Hint:[/] {hint}", highlight=False)
    return ExitCode.CLEAN if report.ok else ExitCode.FINDINGS


def _write_reproducers(report, folder, path, auto_class, trust_remote_code, dtype, placement, early) -> None:
    import transformers

    from .. import _hf
    from ..reproducer import write_reproducers

    cls = _hf.resolve_class(auto_class, _hf.read_config(path, trust_remote_code))
    name = cls.__name__ if hasattr(transformers, cls.__name__) else "AutoModel"
    kwargs = {"trust_remote_code": trust_remote_code, **({"dtype": dtype} if dtype not in (None, "auto") else {}), **placement}
    applied = [w.name for w in early if w.status == "applied"]
    written = write_reproducers(report, folder, model=str(path), auto_class=name, from_pretrained=kwargs, workarounds=applied)
    for script in written:
        stderr().print(f"wrote {script} (python {script}: exit 1 while it is wrong)", highlight=False)
    unsupported = sorted({f.check for f in report.failures} - {p.stem.removeprefix("reproduce_") for p in written})
    if unsupported:
        stderr().print(f"no reproducer for: {', '.join(unsupported)}", highlight=False)
