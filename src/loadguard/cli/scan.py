"""``loadguard scan PATH_OR_HUB_ID...``: predict what loading would get wrong, without weights; one model or a fleet.

Each model (one, or a fleet: several, or ``--from FILE``) runs in a child forked for it alone from this process, which
has imported torch, transformers and loadguard once (:mod:`loadguard._infra.forks`, the pool the matrix uses too), so one
model's remote code cannot leak into the next, a model costs its scan, not another import, and a model's code that
hangs or grows is stopped: ``--jobs`` at a time, ``--timeout`` and ``--memory-limit`` per model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import click

from .._infra import Markup, cell, styled
from .._scan import DEFAULT_TIMEOUT, scan_fleet, scan_row, trustworthy
from ..errors import InvalidOptionError, LoadguardError
from ..formats import Row
from ..report import AuditReport, CheckSummary, Finding, Status, WorkaroundStatus, failing
from ._baseline import apply_baseline, baseline_options
from ._common import SCHEMA_VERSION, ExitCode, parse_placement, quiet_transformers
from ._consoles import stderr, stdout
from ._limits import memory_limit, memory_limit_option
from ._options import executor_option, format_option, workaround_option, workarounds_from_option
from ._output import write
from ._progress import fleet_progress
from ._resume import resumed


def model_targets(paths, from_file) -> list[str]:

    targets = list(paths)
    if from_file:
        try:
            text = Path(from_file).read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidOptionError(
                f"--from {from_file}: {getattr(error, 'strerror', None) or 'not UTF-8 text'}",
                "pass a file with one model folder or Hub id (org/name[@revision]) per line",
            ) from None
        if text.lstrip().startswith("["):  # a JSON list of ids and folders
            try:
                listed = json.loads(text)
            except ValueError as error:
                raise InvalidOptionError(
                    f"--from {from_file}: not a JSON list ({error})", 'e.g. ["org/name", "org/other@v1.0", "./folder"]'
                ) from None
            if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
                raise InvalidOptionError(
                    f"--from {from_file}: a JSON list of strings is expected",
                    'e.g. ["org/name", "org/other@v1.0", "./folder"]',
                )
            targets += [item.strip() for item in listed if item.strip()]
        else:
            lines = text.splitlines()
            targets += [
                kept
                for line in lines
                if (kept := line.split(" #", 1)[0].split("\t#", 1)[0].strip()) and not kept.startswith("#")
            ]
    if not targets:
        raise InvalidOptionError("no model to scan", "pass model folders or Hub ids, or --from FILE with one per line")
    return targets


def _verdict(row: dict) -> str:

    if not row["scanned"]:
        return "could not scan"
    failures = failing(row["findings"])
    return "clean" if not failures else f"{len(failures)} wrong"


def _tensors(row: dict, limit: int = 4) -> str:
    from .._infra import collapse_names

    if not row["scanned"]:
        return row["error"]
    names = collapse_names(
        f["tensor"] + f" ({f['status']})" for f in row["findings"] if f["status"] != Status.UNVERIFIABLE
    )
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _workarounds(row: dict) -> str:
    if not row["scanned"]:
        return row["hint"]
    return ", ".join(w["name"] for w in row["workarounds"] if w["status"] == WorkaroundStatus.APPLIED)


def _markdown(rows: list[dict]) -> str:

    lines = [
        "| model | class | verdict | what a load gets wrong (predicted) | workarounds / hint |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [row["model"], row.get("model_class", ""), _verdict(row), _tensors(row), _workarounds(row)]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--from",
    "from_file",
    default=None,
    metavar="FILE",
    help="A file with one model folder or Hub id per line (# comments).",
)
@click.option("--trust-remote-code", is_flag=True, help="Run the models' own code (read it first).")
@click.option(
    "--auto-class",
    default=None,
    metavar="NAME",
    help="Auto class or model class; default: the architecture the config names, then the causal-LM entry.",
)
@click.option(
    "--dtype",
    default=None,
    metavar="auto|float32|bfloat16|float16",
    help="dtype to predict the load in (default: from_pretrained's).",
)
@click.option(
    "--keys",
    type=click.Choice(["auto", "header", "complete"]),
    default="auto",
    show_default=True,
    help="header: keys/shapes/dtypes from the safetensors headers; complete: the checkpoint holds every key.",
)
@workaround_option("Apply a registered workaround")
@workarounds_from_option(expose=True)
@format_option(
    "json",
    "markdown",
    "sarif",
    "github",
    "junit",
    help="json: one JSON document per model per line; sarif: code scanning; github: workflow annotations "
    "(+ $GITHUB_STEP_SUMMARY); junit: a CI test report.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Models scanned at once (a fleet: each in a child process of its own).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, None),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds one model's scan may take (each model runs in a child process; past it, the child is killed and its row says so).",
)
@memory_limit_option(
    "Memory one model's scan may add (e.g. 4GB), then it is a row saying so; auto: 80% of this machine's memory "
    "shared among --jobs in a fleet, none for one model."
)
@click.option(
    "--assume-checkpoint",
    "assume",
    type=click.Choice(["saved", "complete"]),
    default="saved",
    show_default=True,
    help="Without checkpoint headers: the keys this code's save_pretrained writes (declared ties dropped), or every key.",
)
@click.option(
    "--revision", default=None, metavar="REV", help="Branch, tag or commit of every Hub id (org/name@REV pins one id)."
)
@click.option(
    "--follow-links",
    is_flag=True,
    help="Read a config or checkpoint file that is a link leading out of the model's folder (refused otherwise).",
)
@click.option(
    "--native",
    is_flag=True,
    help="Scan every model class the installed transformers registers in its auto mappings (no PATH).",
)
@click.option(
    "--match",
    default=None,
    metavar="PATTERN",
    help="With --native: only classes or model types matching a glob or containing a substring (e.g. '*ForCausalLM', 'llama*', ForCausalLM).",
)
@click.option(
    "--tasks", default=None, metavar="GLOB", help="With --native: only auto mappings matching (e.g. '*CAUSAL_LM*')."
)
@click.option(
    "--device-map",
    default=None,
    metavar="auto|cpu|JSON",
    help="As from_pretrained's; a scan predicts a load on one device (offloading is not simulated).",
)
@click.option(
    "--max-memory", default=None, metavar="DEV=SIZE,...", help="As from_pretrained's (offloading is not simulated)."
)
@click.option(
    "--offload-folder",
    default=None,
    metavar="DIR",
    type=click.Path(file_okay=False, resolve_path=True),
    help="As from_pretrained's (offloading is not simulated).",
)
@baseline_options
@click.option(
    "--timings",
    is_flag=True,
    help="JSON: add the seconds each stage took (left out otherwise, so two runs print the same rows).",
)
@click.option(
    "--resume",
    "resume_file",
    default=None,
    metavar="FILE",
    type=click.Path(dir_okay=False, resolve_path=True),
    help="Write each model's row to FILE (JSON Lines) as it finishes; models FILE already holds are not scanned again, "
    "so an interrupted fleet finishes the rest.",
)
@executor_option
def scan(
    paths,
    from_file,
    trust_remote_code,
    auto_class,
    dtype,
    keys,
    workarounds,
    workarounds_from,
    fmt,
    jobs,
    timeout,
    memory,
    assume,
    revision,
    follow_links,
    native,
    match,
    tasks,
    device_map,
    max_memory,
    offload_folder,
    baseline_file,
    write_baseline,
    timings,
    resume_file,
    executor,
):
    """Predict, without downloading or reading weights, which tensors loading PATH_OR_HUB_ID would get wrong.

    Hub ids: only *.json and *.py are fetched (and, with --keys header, the safetensors headers by range reads).
    Exit 0: every model predicted clean; 1: findings; 2: none could be scanned; 3: some could not be scanned (partial).
    """

    if native:
        return _native(
            paths or from_file, match, tasks, fmt, jobs, timeout, memory_limit(memory, jobs, fleet=True), executor
        )
    targets = model_targets(paths, from_file)
    fleet = len(targets) > 1 or bool(from_file)
    limit = memory_limit(memory, jobs, fleet)
    placement = parse_placement(device_map, max_memory, offload_folder)
    options = {
        "placement": placement,
        "trust_remote_code": trust_remote_code,
        "auto_class": auto_class,
        "dtype": dtype,
        "keys": keys,
        "workarounds": list(workarounds),
        "workaround_files": [str(Path(f).resolve()) for f in workarounds_from],
        "follow_links": follow_links,
        "revision": revision,
        "assume_checkpoint": assume,
    }
    from .._infra import forks

    if resume_file:

        def run(todo, write):
            return dict(
                zip(todo, _run_fleet(todo, options, jobs, timeout, limit, lambda index, row: write(row), executor))
            )

        rows = resumed(
            resume_file,
            targets,
            lambda row: row["model"] if isinstance(row.get("model"), str) and "scanned" in row else None,
            run,
            what="model(s) already scanned",
            valid=valid_row,
        )
    elif not fleet and not forks.available():  # no fork here (not Linux/macOS): in this process, no limit holds
        rows = [scan_row(targets[0], options)]
    else:  # one model too runs in a child of its own, which --timeout and --memory-limit can stop
        rows = _run_fleet(targets, options, jobs, timeout, limit, executor=executor)
    if baseline_file or write_baseline:
        kept = apply_baseline([Row.from_scan(row) for row in rows], baseline_file, write_baseline)
        if kept is None:
            return ExitCode.CLEAN
        rows = [
            {**row, "findings": [f.to_dict() for f in k.findings]} if row["scanned"] else row
            for row, k in zip(rows, kept)
        ]
    scanned = [row for row in rows if row["scanned"]]
    write(fmt, _Scanned(tuple(rows), timings))
    if len(rows) == 1 and not rows[0]["scanned"]:  # one model: the usual Error/Hint, exit 2
        raise LoadguardError(rows[0]["error"], rows[0]["hint"])
    if not scanned:
        stderr().print(Markup("[bold red]Error:[/] none of the models could be scanned"), highlight=False)
        return ExitCode.COULD_NOT_RUN
    if len(scanned) < len(rows):  # some could not be scanned: whatever the others show, the answer is partial
        return ExitCode.PARTIAL
    if any(_verdict(row) != "clean" for row in rows):
        return ExitCode.FINDINGS
    return ExitCode.CLEAN


def left_behind_line(row: dict) -> str:
    return (
        f"{row['model']}: its code left {row['left_behind']} process(es) running after its scan; loadguard killed them "
        "(code that forks at import or starts servers)"
    )


def valid_row(row: dict) -> bool:
    """Whether a ``--resume`` row has the shape this version writes: everything that shows a row can show it."""

    if not isinstance(row.get("model"), str) or not isinstance(row.get("scanned"), bool):
        return False
    if not row["scanned"]:
        return isinstance(row.get("error"), str) and isinstance(row.get("hint"), (str, type(None)))
    try:
        if not (
            isinstance(row.get("model_class"), str)
            and isinstance(row.get("checks"), list)
            and isinstance(row.get("workarounds"), list)
            and all(
                isinstance(w, dict) and isinstance(w.get("name"), str) and isinstance(w.get("status"), str)
                for w in row["workarounds"]
            )
        ):
            return False
        Row.from_scan(row)
        json_row(row)
        return (
            isinstance(row.get("checkpoint"), (str, type(None)))
            and bool(_verdict(row))
            and isinstance(_tensors(row), str)
            and trustworthy(row)  # consistent, and of the files the folder holds now
        )
    except Exception:
        return False


def _run_fleet(targets, options, jobs, timeout, limit, on_row=None, executor=None) -> list[dict]:
    with fleet_progress(len(targets)) as advance:
        return scan_fleet(targets, options, jobs, timeout, limit, on_done=advance, on_row=on_row, executor=executor)


def json_row(row: dict, timings: bool = False) -> dict:
    """A scan row as ``--format json`` prints it: ``schema_version`` and ``ok`` first (``ok`` is False for a model that
    could not be scanned: ``scanned`` False, ``error`` {kind, message, hint, fixes} says why, ``findings`` empty);
    ``seconds`` only with ``--timings``."""

    ok = bool(row["scanned"]) and not failing(row.get("findings", []))
    out = {"schema_version": SCHEMA_VERSION, "ok": ok, **{"findings": [], **row}}
    if not row["scanned"]:  # the same shape as audit's: error {kind, message, hint, fixes}
        out["error"] = {
            "kind": out.pop("error_kind", "ScanError"),
            "message": row["error"],
            "hint": out.pop("hint", None),
            "fixes": out.pop("fixes", []),
        }
    if not timings:
        out.pop("seconds", None)
        out.pop("fetched_bytes", None)
    return out


def print_scan(row: dict, out=None) -> None:
    """One model's prediction, as the audit prints its report."""
    from ._render import check_lines, detail_lines, findings_table, workaround_line

    out = out or stdout()
    findings = [Finding.from_dict(f) for f in row["findings"]]
    failures = [f for f in findings if f.failing]
    verdict = (
        Markup("[bold green]predicted clean[/]")
        if not failures
        else styled("[bold red]{} tensor(s) predicted wrong[/]", len(failures))
    )
    out.print(styled("[bold]{}[/] ({}, scanned without weights): {}", row["model"], row["model_class"], verdict))
    if findings:
        out.print(findings_table(findings))
        for line in detail_lines(findings):
            out.print(line, highlight=False, soft_wrap=True, markup=False)

    report = AuditReport(
        row["model"],
        row["model_class"],
        row["checkpoint"],
        tuple(findings),
        tuple(CheckSummary(**c) for c in row["checks"]),
    )
    for line in check_lines(report):
        out.print(line, highlight=False, soft_wrap=True)
    for outcome in row["workarounds"]:
        out.print(workaround_line(outcome), highlight=False, soft_wrap=True)


def _native(extra, match, tasks, fmt, jobs, timeout, limit, executor=None) -> int:
    """``--native``: every auto-mapped class of the installed transformers, a row each."""

    from .._scan import native as native_module

    if extra:
        raise InvalidOptionError(
            "--native scans transformers' own classes: it takes no PATH or --from",
            "drop the paths, or scan them without --native",
        )
    quiet_transformers()
    natives = native_module.classes(match, tasks=tasks)
    if not natives:
        raise InvalidOptionError(f"no auto-mapped class matches {match or tasks!r}", "widen --match / --tasks (globs)")
    start = time.perf_counter()
    rows = native_module.scan_all(natives, jobs=jobs, timeout=timeout, memory_limit=limit, executor=executor)
    seconds = time.perf_counter() - start
    scanned = [row for row in rows if row["scanned"]]
    write(fmt, _Swept(tuple(rows)))
    clean = sum(1 for row in scanned if _verdict(row) == "clean")
    stderr().print(
        f"{len(rows)} classes in {seconds:.0f} s: {clean} clean, {len(scanned) - clean} with findings, {len(rows) - len(scanned)} could not be built",
        highlight=False,
    )
    if not scanned:
        return ExitCode.COULD_NOT_RUN
    return ExitCode.CLEAN if clean == len(rows) else ExitCode.FINDINGS


@dataclass(frozen=True)
class _Scanned:
    """A scan's rows (one model or a fleet), as every format shows them."""

    rows_: tuple[dict, ...]
    timings: bool
    command = "scan"

    def document(self) -> list[dict]:
        return [json_row(row, self.timings) for row in self.rows_]

    def markdown(self) -> str:
        return _markdown(list(self.rows_))

    def rows(self):

        return [Row.from_scan(row) for row in self.rows_]

    def table(self, out, err) -> None:
        if len(self.rows_) == 1:
            if self.rows_[0][
                "scanned"
            ]:  # one model that could not be scanned: only the Error/Hint lines the command raises
                print_scan(self.rows_[0], out)
            if self.rows_[0].get("left_behind"):
                err.print(left_behind_line(self.rows_[0]), highlight=False, markup=False)
            return
        from rich.table import Table

        table = Table(header_style="bold")
        for column in ("model", "class", "verdict", "what a load gets wrong (predicted)", "workarounds / hint"):
            table.add_column(column, overflow="fold")
        for row in self.rows_:
            table.add_row(row["model"], row.get("model_class", ""), _verdict(row), _tensors(row), _workarounds(row))
        out.print(table)
        for row in self.rows_:
            if row.get("left_behind"):
                err.print(left_behind_line(row), highlight=False, markup=False)


@dataclass(frozen=True)
class _Swept:
    """``--native``: a row per transformers class (the table lists those not clean)."""

    rows_: tuple[dict, ...]
    command = "scan"

    def document(self) -> list[dict]:
        return list(self.rows_)

    def markdown(self) -> str:
        from .._scan import native as native_module

        return native_module.markdown(list(self.rows_))

    def rows(self):

        return [Row.from_scan(row) for row in self.rows_]

    def table(self, out, err) -> None:
        from rich.table import Table

        table = Table(header_style="bold", title="transformers' own classes, scanned weightless")
        for column in ("class", "verdict", "what a load gets wrong (predicted)"):
            table.add_column(column, overflow="fold")
        for row in self.rows_:
            if row["scanned"] and _verdict(row) == "clean":
                continue
            table.add_row(row["model"], _verdict(row), _tensors(row))
        out.print(table)
