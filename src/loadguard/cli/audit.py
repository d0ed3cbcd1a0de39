"""``loadguard audit PATH``: load a model as a user would, audit it, optionally repair it in memory."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .. import _audit, _files
from .._infra import Markup, styled
from ..errors import LoadguardError, hint_for
from ..formats import Row
from ..report import Check, WorkaroundStatus
from ._baseline import apply_baseline, baseline_options
from ._common import SCHEMA_VERSION, ExitCode, load_model, loading_options
from ._consoles import stderr
from ._limits import limits_options
from ._options import format_option
from ._output import write


@click.command()
@limits_options(unfinished=lambda given, error: write(given["fmt"], _NotLoaded(str(given["path"]), error)))
@loading_options
@click.option(
    "--repair",
    "do_repair",
    is_flag=True,
    help="Also repair in memory and re-audit (never writes to PATH): exit 0 when every finding was repaired and the re-audit is clean.",
)
@click.option(
    "--exit-non-zero-on-repair",
    "strict_repair",
    is_flag=True,
    help="With --repair: exit 1 when anything needed repairing (a gate that fails on any broken load).",
)
@format_option(
    "json",
    "sarif",
    "github",
    "junit",
    help="sarif: code scanning; github: workflow annotations (+ $GITHUB_STEP_SUMMARY); junit: a CI test report.",
)
@click.option(
    "--reproducer",
    "reproducer_dir",
    default=None,
    type=click.Path(file_okay=False, resolve_path=True),
    metavar="DIR",
    help="Write a standalone script per kind of finding (torch + transformers only) that exits 1 while it is wrong: "
    "to attach to an upstream issue.",
)
@click.option(
    "--forward",
    "run_forward",
    is_flag=True,
    help="After the load checks, run the loaded model: one forward pass and 8 greedy tokens on inputs built from its "
    "config (no tokenizer). A crash is a finding (check runs) with the model's line and the API it called; a wrong "
    "tensor the run rebuilds before using it is said to be so.",
)
@baseline_options
@click.option(
    "--timings",
    is_flag=True,
    help="JSON: add the seconds each stage took (left out otherwise, so two runs print the same document).",
)
def audit(
    path,
    trust_remote_code,
    auto_class,
    dtype,
    device,
    poison,
    workarounds,
    strict_stale,
    placement,
    do_repair,
    strict_repair,
    fmt,
    reproducer_dir,
    run_forward,
    baseline_file,
    write_baseline,
    timings,
):
    """Load PATH with from_pretrained and report every tensor that is not what its code and checkpoint define.

    Exit code 0: the model as loaded is clean (with --repair: or every finding was repaired and the re-audit is
    clean); 1: findings (left after --repair); 2: could not run.
    """

    try:
        model, early = load_model(
            path,
            trust_remote_code=trust_remote_code,
            auto_class=auto_class,
            dtype=dtype,
            device=device,
            placement=placement,
            poison=poison,
            workarounds=workarounds,
            strict_stale=strict_stale,
        )
    except LoadguardError as error:  # a machine format still gets its document: this model, not checked, and why
        write(fmt, _NotLoaded(str(path), error))
        raise
    from .. import workarounds as registry
    from .._audit import repair as run_repair

    # the model as loaded is what the exit code and `ok` describe
    report, after_workarounds = _audit.audit_after_load(
        model, registry.resolve(workarounds), path, early=early, strict=strict_stale
    )
    if run_forward and not do_repair:  # the model as loaded runs (with --repair: the repaired one, below)
        report = _with_run(model, report, report)
    rows = apply_baseline([Row.from_report(report, str(path))], baseline_file, write_baseline)
    if rows is None:
        return ExitCode.CLEAN
    report = dataclasses.replace(
        report, findings=rows[0].findings
    )  # known findings (a baseline) are neither shown nor failing
    current = after_workarounds or report
    tensors = dataclasses.replace(current, findings=tuple(f for f in current.findings if f.check != Check.RUNS))
    repaired = run_repair(model, tensors) if do_repair and not tensors.ok else None
    if run_forward and do_repair:
        report = _with_run(model, repaired.after if repaired is not None else tensors, report)
    crashed = any(f.check == Check.RUNS and f.failing for f in report.findings)  # no repair answers a crash
    loaded = dataclasses.replace(report, findings=tuple(f for f in report.findings if f.check != Check.RUNS))
    if reproducer_dir and not loaded.ok:  # a script per wrong tensor: a crash has its own finding's line
        _write_reproducers(model, loaded, reproducer_dir, path, auto_class, trust_remote_code, dtype, placement, early)
    write(fmt, _Audited(str(path), report, repaired, after_workarounds, timings))
    return repair_exit(
        report.ok,
        do_repair and not crashed and (tensors.ok or (repaired is not None and repaired.ok)),
        strict_repair,
    )


def _with_run(model, held, report):
    """``report`` with the ``runs`` check of the model as ``held`` describes it (as loaded, or repaired). The run happens
    in a child forked for it where the model lives on the CPU: a forward that kills its process (a segfault in a
    kernel the model's code calls) is then a finding beside what the load checks found, never the end of the audit."""
    ran = _run_contained(model, held)
    if held is report:  # the model as loaded: its findings as the run saw them (a tensor it rebuilt before use)
        return ran
    added = tuple(f for f in ran.findings if f.check == Check.RUNS)
    return dataclasses.replace(report, findings=report.findings + added, checks=report.checks + ran.checks[-1:])


def _run_contained(model, held):
    """:func:`loadguard.runner.check_run` in a child forked for it (one thread: this process has run torch's thread
    pool), or here where a fork cannot carry the model (no ``os.fork``, a model on a GPU); a child that dies gives a
    ``crashed`` finding naming how it died."""
    from .._infra import forks
    from ..report import CheckSummary, Finding, Status
    from ..runner import check_run

    on_cpu = all(t.device.type in ("cpu", "meta") for t in (*model.parameters(), *model.buffers()))
    if not forks.available() or not on_cpu:
        return check_run(model, held, how="cli")
    unpicklable = dataclasses.replace(held, _context=None)
    (outcome,) = forks.run(
        lambda _: dataclasses.replace(check_run(model, unpicklable, how="cli"), _context=None), [None]
    )
    if outcome.ok:
        return outcome.value
    died = Finding(
        "forward",
        "call",
        Check.RUNS,
        Status.CRASHED,
        "",
        (),
        "",
        f"running the model (one forward pass, then 8 greedy tokens) ended its process: {outcome.error}; the load "
        "checks above ran before it",
    )
    summary = CheckSummary(
        Check.RUNS, True, checked=1, failed=1, reason=f"the run ended its process ({outcome.error})"
    )
    return dataclasses.replace(held, findings=(*held.findings, died), checks=(*held.checks, summary))


def repair_exit(clean: bool, repaired_clean: bool, strict: bool) -> ExitCode:
    """ruff's ``--fix`` convention: 0 when the model is clean, or when ``--repair`` repaired every finding and the
    re-check is clean (unless ``--exit-non-zero-on-repair``); 1 when something is left."""
    if clean or (repaired_clean and not strict):
        return ExitCode.CLEAN
    return ExitCode.FINDINGS


@dataclass(frozen=True)
class _Audited:
    """What ``audit`` found, as every format shows it."""

    path: str
    report: Any
    repaired: Any
    after_workarounds: Any
    timings: bool
    command = "audit"

    def document(self) -> dict:
        from ._render import report_json

        after = self.after_workarounds
        extra = {
            "after_workarounds": None
            if after is None
            else {"ok": after.ok, "findings": [f.to_dict() for f in after.findings]}
        }
        document = json.loads(
            report_json(self.report, self.repaired, schema_version=SCHEMA_VERSION, error=None, **extra)
        )
        if not self.timings:
            document.pop("seconds", None)
        return document

    def rows(self) -> list[Row]:
        return [Row.from_report(self.report, self.path)]

    def table(self, out, err) -> None:
        from ._render import next_step, print_report

        print_report(out, self.report, self.repaired)
        if self.after_workarounds is not None:
            out.print(
                Markup(
                    "after workarounds: "
                    + ("[bold green]clean[/]" if self.after_workarounds.ok else "[bold red]still broken[/]")
                )
            )
        hint = next_step(self.after_workarounds or self.report, self.repaired)
        if hint:
            err.print(styled("[bold]Hint:[/] {}", hint), highlight=False)


@dataclass(frozen=True)
class _NotLoaded:
    """A model ``audit`` could not load: a document and a row saying why (the table has only the Error/Hint lines)."""

    path: str
    error: Any
    command = "audit"

    def document(self) -> dict:

        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.path,
            "ok": False,
            "findings": [],
            "error": {
                "kind": type(self.error).__name__,
                "message": self.error.message,
                "hint": hint_for(self.error, "cli"),
                "fixes": list(self.error.fixes),
            },
        }

    def rows(self) -> list[Row]:

        return [Row.failed(self.path, self.error.message, hint_for(self.error, "cli"))]

    def table(self, out, err) -> None:
        pass


def _write_reproducers(model, report, folder, path, auto_class, trust_remote_code, dtype, placement, early) -> None:
    import transformers

    from .. import _hf
    from .._audit import write_reproducers

    cls = _hf.resolve_class(auto_class, _files.read_config(path, trust_remote_code))
    name = cls.__name__ if hasattr(transformers, cls.__name__) else "AutoModel"
    kwargs = {
        "trust_remote_code": trust_remote_code,
        **({"dtype": dtype} if dtype not in (None, "auto") else {}),
        **placement,
    }
    applied = [w.name for w in early if w.status == WorkaroundStatus.APPLIED]
    written = write_reproducers(
        report, folder, model=str(path), auto_class=name, from_pretrained=kwargs, workarounds=applied
    )
    for script in written:
        stderr().print(f"wrote {script} (python {script}: exit 1 while it is wrong)", highlight=False)

    from .._fix import upstream_patch

    diff = upstream_patch(model, report)  # what transformers' own classes leave wrong, fixed where transformers would
    if diff:
        (Path(folder) / "transformers-upstream.diff").write_text(diff)
        stderr().print(
            f"wrote {Path(folder) / 'transformers-upstream.diff'} (the same change against transformers' source, for a pull request)",
            highlight=False,
        )
    unsupported = sorted({f.check for f in report.failures} - {p.stem.removeprefix("reproduce_") for p in written})
    if unsupported:
        stderr().print(f"no reproducer for: {', '.join(unsupported)}", highlight=False)
