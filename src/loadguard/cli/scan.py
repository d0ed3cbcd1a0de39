"""``loadguard scan PATH_OR_HUB_ID...``: predict what loading would get wrong, without weights; one model or a fleet.

A fleet (several models, or ``--from FILE``) runs each model in a fresh interpreter, so one model's remote code
cannot leak into the next: a ``concurrent.futures`` process pool with the ``spawn`` start method and one task
per worker process (``max_tasks_per_child=1``), ``--jobs`` at a time. The standard library's pool serves better
here than pytest-xdist/execnet (what ``repeat`` uses): there is no test session to distribute, only independent
function calls whose results are JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ._common import ExitCode, emit, quiet_transformers, stderr, stdout, workarounds_from_option


def _result(target: str, options: dict) -> dict:
    """One model's scan as JSON-able data: the report, or why it could not be scanned."""
    from .. import workarounds as registry
    from .._transformers import return_freed_memory
    from ..errors import LoadguardError, hint_for
    from ..scan import scan

    quiet_transformers()
    return_freed_memory()  # this process only scans: keep construction scratch from staying resident
    for file in options.get("workaround_files", ()):
        registry.load_file(file)
    try:
        report = scan(
            target,
            model_class=options.get("auto_class"),
            keys=options.get("keys", "auto"),
            dtype=options.get("dtype"),
            workarounds=list(options.get("workarounds", ())),
            trust_remote_code=options.get("trust_remote_code", False),
            **options.get("placement", {}),
        )
    except LoadguardError as error:
        return {"model": target, "scanned": False, "error": error.message, "hint": hint_for(error, "cli"), "fixes": list(error.fixes)}
    except Exception as error:  # a model's code failing in a way nothing translated: a row, not an abort
        return {"model": target, "scanned": False, "error": f"unexpected {type(error).__name__}: {error}", "hint": "set LOADGUARD_DEBUG=1 and scan it alone", "fixes": []}
    return {"model": target, "scanned": True, **report.to_dict()}


def _scan_in_fresh_interpreter(target: str, options: dict) -> dict:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return _result(target, options)


def scan_fleet(targets: list[str], options: dict, jobs: int) -> list[dict]:
    """Each target in a fresh interpreter, ``jobs`` at a time; results in the order of ``targets``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
        futures = [pool.submit(_scan_in_fresh_interpreter, target, options) for target in targets]
        return [future.result() for future in futures]


def _targets(paths, from_file) -> list[str]:
    from ..errors import InvalidOptionError

    targets = list(paths)
    if from_file:
        try:
            lines = Path(from_file).read_text().splitlines()
        except OSError as error:
            raise InvalidOptionError(f"--from {from_file}: {error.strerror}", "pass a file with one model folder or Hub id per line") from None
        targets += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not targets:
        raise InvalidOptionError("no model to scan", "pass model folders or Hub ids, or --from FILE with one per line")
    return targets


def _verdict(row: dict) -> str:
    from ..report import failing

    if not row["scanned"]:
        return "could not scan"
    failures = failing(row["findings"])
    return "clean" if not failures else f"{len(failures)} wrong"


def _tensors(row: dict, limit: int = 4) -> str:
    from ..render import collapse_names

    if not row["scanned"]:
        return row["error"]
    names = collapse_names(f["tensor"] + f" ({f['status']})" for f in row["findings"] if f["status"] != "unverifiable")
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _workarounds(row: dict) -> str:
    if not row["scanned"]:
        return row["hint"]
    return ", ".join(w["name"] for w in row["workarounds"] if w["status"] == "applied")


def _markdown(rows: list[dict]) -> str:
    lines = ["| model | class | verdict | what a load gets wrong (predicted) | workarounds / hint |", "|---|---|---|---|---|"]
    for row in rows:
        cells = [row["model"], row.get("model_class", ""), _verdict(row), _tensors(row), _workarounds(row)]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines)


@click.command()
@click.argument("paths", nargs=-1)
@click.option("--from", "from_file", default=None, metavar="FILE", help="A file with one model folder or Hub id per line (# comments).")
@click.option("--trust-remote-code", is_flag=True, help="Run the models' own code (read it first).")
@click.option("--auto-class", default=None, metavar="NAME", help="Auto class or model class; default: the architecture the config names, then the causal-LM entry.")
@click.option("--dtype", default=None, metavar="auto|float32|bfloat16|float16", help="dtype to predict the load in (default: from_pretrained's).")
@click.option("--keys", type=click.Choice(["auto", "header", "complete"]), default="auto", show_default=True,
              help="header: keys/shapes/dtypes from the safetensors headers; complete: the checkpoint holds every key.")
@click.option("--workaround", "workarounds", multiple=True, metavar="NAME", help="Apply a registered workaround (repeatable); 'auto' applies those whose failure the load hits.")
@workarounds_from_option(expose=True)
@click.option("--format", "fmt", type=click.Choice(["human", "json", "markdown"]), default="human", show_default=True,
              help="json: one JSON document per model per line.")
@click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True, help="Models scanned at once (a fleet: each in a fresh interpreter).")
@click.option("--device-map", default=None, metavar="auto|cpu|JSON", help="As from_pretrained's; a scan predicts a load on one device (offloading is not simulated).")
@click.option("--max-memory", default=None, metavar="DEV=SIZE,...", help="As from_pretrained's (offloading is not simulated).")
@click.option("--offload-folder", default=None, metavar="DIR", help="As from_pretrained's (offloading is not simulated).")
def scan(paths, from_file, trust_remote_code, auto_class, dtype, keys, workarounds, workarounds_from, fmt, jobs, device_map, max_memory, offload_folder):
    """Predict, without downloading or reading weights, which tensors loading PATH_OR_HUB_ID would get wrong.

    Hub ids: only *.json and *.py are fetched (and, with --keys header, the safetensors headers by range reads).
    Exit 0: every model predicted clean; 1: findings, or a model that could not be scanned; 2: none could be scanned.
    """
    from ..render import print_report

    from ._common import parse_placement

    targets = _targets(paths, from_file)
    placement = parse_placement(device_map, max_memory, offload_folder)
    options = {
        "placement": placement,
        "trust_remote_code": trust_remote_code,
        "auto_class": auto_class,
        "dtype": dtype,
        "keys": keys,
        "workarounds": list(workarounds),
        "workaround_files": [str(Path(f).resolve()) for f in workarounds_from],
    }
    if len(targets) == 1 and not from_file:
        rows = [_result(targets[0], options)]
    else:
        rows = scan_fleet(targets, options, jobs)
    scanned = [row for row in rows if row["scanned"]]
    if fmt == "json":
        for row in rows:
            emit(json.dumps(row, sort_keys=False))
    elif fmt == "markdown":
        emit(_markdown(rows))
    elif len(rows) == 1 and scanned:
        print_scan(rows[0])
    else:
        from rich.table import Table

        table = Table(header_style="bold")
        for column in ("model", "class", "verdict", "what a load gets wrong (predicted)", "workarounds / hint"):
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(row["model"], row.get("model_class", ""), _verdict(row), _tensors(row), _workarounds(row))
        stdout().print(table)
    if len(rows) == 1 and not rows[0]["scanned"]:  # one model: the usual Error/Hint, exit 2
        from ..errors import LoadguardError

        raise LoadguardError(rows[0]["error"], rows[0]["hint"])
    if not scanned:
        stderr().print("[bold red]Error:[/] none of the models could be scanned", highlight=False)
        return ExitCode.COULD_NOT_RUN
    if any(not row["scanned"] or _verdict(row) != "clean" for row in rows):
        return ExitCode.FINDINGS
    return ExitCode.CLEAN


def print_scan(row: dict) -> None:
    """One model's prediction, as the audit prints its report."""
    from ..render import check_lines, detail_lines, findings_table, workaround_line
    from ..report import Finding

    out = stdout()
    findings = [Finding(**{k: (tuple(v) if k == "shape" else v) for k, v in f.items()}) for f in row["findings"]]
    failures = [f for f in findings if f.failing]
    verdict = "[bold green]predicted clean[/]" if not failures else f"[bold red]{len(failures)} tensor(s) predicted wrong[/]"
    out.print(f"[bold]{row['model']}[/] ({row['model_class']}, scanned without weights): {verdict}")
    if findings:
        out.print(findings_table(findings))
        for line in detail_lines(findings):
            out.print(line, highlight=False, soft_wrap=True)
    from ..report import AuditReport, CheckSummary

    report = AuditReport(row["model"], row["model_class"], row["checkpoint"], tuple(findings), tuple(CheckSummary(**c) for c in row["checks"]))
    for line in check_lines(report):
        out.print(line, highlight=False, soft_wrap=True)
    for outcome in row["workarounds"]:
        out.print(workaround_line(outcome), highlight=False, soft_wrap=True)
