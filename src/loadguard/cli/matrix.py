"""``loadguard matrix PATH_OR_ID... --transformers V1,V2,...``: which transformers versions break which models,
and which workarounds each version still needs."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click

from ._common import ExitCode, emit, progress, stderr, stdout
from ._options import executor_option, format_option, workarounds_from_option

_SPECIFIER = set("<>=!~*")


def versions_from(text: str, max_versions: int | None) -> list[str]:
    """``4.57.6,5.24.0`` (exact versions) or a specifier (``>=5,<5.25``) expanded from the package index."""
    from .. import envs

    versions: list[str] = []
    for part in [p.strip() for p in text.split(",") if p.strip()] if not (set(text) & _SPECIFIER) else [text]:
        versions += envs.released_versions(part, max_versions) if set(part) & _SPECIFIER else [part]
    return list(dict.fromkeys(versions))


def _cell_text(cell) -> str:
    from ..report import failing as failing_findings
    from ..render import collapse_names

    if cell.status == "unavailable":
        return f"not installable here: {cell.error}"
    if cell.status == "error":
        return f"could not scan: {cell.error}"
    if cell.status == "clean":
        return "clean"
    failing = failing_findings(cell.report["findings"])
    names = collapse_names(f"{f['tensor']} ({f['status']})" for f in failing)
    if len(names) > 4:
        return ", ".join(names[:3]) + f" and {len(names) - 3} more ({len(failing)} tensors)"
    return ", ".join(names)


def _markdown(matrix) -> str:
    header = "| model | " + " | ".join(f"transformers {v}" for v in matrix.versions) + " |"
    lines = [header, "|---" * (len(matrix.versions) + 1) + "|"]
    for model in matrix.models:
        lines.append(f"| {model} | " + " | ".join(_cell_text(matrix.cell(model, v)).replace("|", "\\|") for v in matrix.versions) + " |")
        for m, name, row in matrix.workaround_rows():
            if m == model:
                lines.append(f"| ↳ workaround `{name}` | " + " | ".join(row[v] for v in matrix.versions) + " |")
    return "\n".join(lines)


@click.command()
@click.argument("paths", nargs=-1)
@click.option("--transformers", "transformers_versions", default=None, metavar="VERSIONS",
              help="Comma-separated versions (4.57.6,5.24.0) or a specifier ('>=5,<5.25') expanded from the package index.")
@click.option("--max-versions", type=click.IntRange(1, 200), default=None, help="Cap a specifier's versions (spread from oldest to newest).")
@click.option("--full", is_flag=True, help="A full audit of each local checkpoint instead of a scan (needs the weights).")
@click.option("--trust-remote-code", is_flag=True, help="Run the models' own code (read it first).")
@click.option("--auto-class", default=None, metavar="NAME", help="Auto class or model class for every model.")
@click.option("--keys", type=click.Choice(["auto", "header", "complete"]), default="auto", show_default=True, help="Where a scan takes the checkpoint's keys from.")
@click.option("--workaround", "workarounds", multiple=True, metavar="NAME",
              help="Apply (or, after load, assess) a registered workaround in every cell; a row per model says where it is needed.")
@workarounds_from_option(expose=True)
@click.option("--bisect", nargs=2, default=None, metavar="LOW HIGH", help="The first version between LOW and HIGH at which each model's verdict changes.")
@click.option("--diff", "diff_versions", nargs=2, default=None, metavar="A B",
              help="Run versions A and B and say, per model, how the verdict moved (new failure, fixed, changed finding): "
                   "exit 1 when any model got worse.")
@click.option("--native", is_flag=True, help="Every class each release's auto mappings register (no PATH): only the classes whose verdict differs between the versions.")
@click.option("--match", default=None, metavar="PATTERN", help="With --native: only classes or model types matching a glob or containing a substring.")
@click.option("--tasks", default=None, metavar="GLOB", help="With --native: only auto mappings matching (e.g. '*CAUSAL_LM*').")
@format_option("json", "markdown", "sarif", "github", "junit", help="sarif, github, junit: a result per cell, its model named with its transformers version.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True, help="Cells at once (each a fresh interpreter).")
@click.option("--timeout", type=click.FloatRange(1, None), default=900.0, show_default=True,
              help="Seconds one cell may take (it runs in a child process, killed past it; its cell says so).")
@click.option("--memory-limit", "memory", default="auto", show_default=True, metavar="SIZE|auto|none",
              help="Memory one cell may add (e.g. 4GB); past it, its cell says so; auto: 80% of this machine's memory shared among --jobs.")
@executor_option
@click.option("--resume", "resume_file", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Append each cell to FILE (JSON Lines) as it finishes; given FILE from an interrupted run, run only the cells it lacks.")
def matrix(paths, transformers_versions, max_versions, full, trust_remote_code, auto_class, keys, workarounds, workarounds_from, bisect, diff_versions, native, match, tasks, fmt, jobs, timeout, memory, executor, resume_file):
    """Scan (or --full: audit) every model under every transformers version, each in its own cached environment.

    Exit 0: every cell clean; 1: findings, or a model that could not be scanned; 2: could not run.
    """
    matrix_module = importlib.import_module("loadguard.matrix")  # loadguard.matrix is the function
    from ..errors import InvalidOptionError
    from ..formats import EMITTED, render
    from .scan import memory_limit

    if (native or bisect or diff_versions) and fmt in EMITTED:
        raise InvalidOptionError(f"--format {fmt} is for a matrix's cells", "use human, json or markdown with --native, --bisect or --diff")
    if native:
        return _native(paths, transformers_versions, max_versions, match, tasks, fmt, jobs, executor)
    if not paths:
        raise InvalidOptionError("no model given", "pass model folders or Hub ids")
    files = [str(Path(f).resolve()) for f in workarounds_from]
    if bisect:
        options = matrix_module._options(trust_remote_code, workarounds, files, auto_class, "" if full else keys)
        results = []
        for model in paths:
            with progress(f"Bisecting {model} between transformers {bisect[0]} and {bisect[1]}", after=0.5):
                results.append(matrix_module.bisect(model, bisect[0], bisect[1], full=full, options=options, executor=executor))
        if fmt == "json":
            emit(json.dumps({"bisections": [r.to_dict() for r in results]}, indent=2))
        else:
            for result in results:
                if result.first_changed is None:
                    stdout().print(f"{result.model}: the same verdict from {result.low} to {result.high} ({len(result.cells)} of {result.candidates} versions run)", highlight=False)
                    continue
                before = next(c for c in result.cells if c.transformers == result.low).verdict()
                after = next(c for c in result.cells if c.transformers == result.first_changed).verdict()
                stdout().print(
                    f"{result.model}: first changes at transformers {result.first_changed} ({len(result.cells)} of {result.candidates} versions run)\n"
                    f"  {result.low}: {before}\n  {result.first_changed}: {after}",
                    highlight=False,
                )
        changed = any(r.first_changed for r in results)
        return ExitCode.FINDINGS if changed else ExitCode.CLEAN
    if diff_versions:
        if transformers_versions:
            raise InvalidOptionError("--diff A B names the two versions: --transformers is not needed with it", "drop --transformers")
        transformers_versions = ",".join(diff_versions)
    if not transformers_versions:
        raise InvalidOptionError("which transformers versions? none given", "pass --transformers 4.57.6,5.24.0 (or a specifier), or --bisect LOW HIGH")
    versions = versions_from(transformers_versions, max_versions)
    if not versions:
        raise InvalidOptionError(f"no released transformers version matches {transformers_versions!r}", "widen the specifier")
    options = dict(full=full, workarounds=list(workarounds), workaround_files=files, trust_remote_code=trust_remote_code, auto_class=auto_class,
                   keys=keys, jobs=jobs, limits={"timeout": timeout, "memory_limit": memory_limit(memory, jobs, fleet=True)}, executor=executor)
    with progress(f"Preparing {len(versions)} environment(s) and {len(versions) * len(paths)} cell(s)", after=0.5):
        if resume_file:
            result = _resumed_matrix(matrix_module, resume_file, list(paths), versions, options)
        else:
            result = matrix_module.run(list(paths), versions, **options)
    if diff_versions:
        return _diff(result, *[versions_from(v, 1)[0] for v in diff_versions], fmt)
    if fmt == "json":
        emit(json.dumps(result.to_dict(), indent=2))
    elif fmt == "markdown":
        emit(_markdown(result))
    elif fmt in EMITTED:
        emit(render(fmt, cell_rows(result), command="matrix"))
    else:
        from rich.table import Table

        table = Table(header_style="bold", title=f"loadguard matrix ({result.mode})")
        table.add_column("model", overflow="fold")
        for version in result.versions:
            table.add_column(f"transformers {version}", overflow="fold")
        for model in result.models:
            table.add_row(model, *(_cell_text(result.cell(model, v)) for v in result.versions))
            for m, name, row in result.workaround_rows():
                if m == model:
                    table.add_row(f"  ↳ workaround {name}", *(row[v] for v in result.versions))
        stdout().print(table)
        for environment in result.environments:
            state = "created" if environment.created else "cached"
            text = f"transformers {environment.version}: environment {state}" + (f" in {environment.seconds:.1f} s" if environment.created else "")
            if not environment.ok:
                text += f"; not installable here: {environment.reason}"
            check = result.selfchecks.get(environment.version)
            if check is not None:
                if check.get("error"):
                    text += f"; scan self-check could not run: {check['error']}"
                else:
                    text += f"; scan self-check {'passed' if check['ok'] else 'FAILED: ' + '; '.join(check['differing'][:3])}" + (
                        " (recorded)" if check.get("cached") else f" ({check['seconds']:.1f} s)"
                    )
            stderr().print(text, highlight=False)
        stderr().print(f"{len(result.cells)} cells in {result.seconds['cells']:.1f} s ({result.seconds['per_cell']:.2f} s per cell)", highlight=False)
    if all(c.status == "unavailable" for c in result.cells):
        stderr().print("[bold red]Error:[/] none of the transformers versions could be installed here", highlight=False)
        return ExitCode.COULD_NOT_RUN
    return ExitCode.CLEAN if all(c.status == "clean" for c in result.cells) else ExitCode.FINDINGS


def cell_rows(result) -> list:
    """Every cell as a :class:`loadguard.formats.Row`, named ``MODEL @ transformers VERSION`` (its folder kept, so
    locations resolve)."""
    import dataclasses

    from ..formats import Row

    rows = []
    for cell in result.cells:
        label = f"{cell.model} @ transformers {cell.transformers}"
        if cell.report is None:
            row = Row.failed(cell.model, f"transformers {cell.transformers}: {cell.error}", cell.hint or None, "matrix")
        else:
            row = Row.from_scan({**cell.report, "model": cell.model, "scanned": True})
        rows.append(dataclasses.replace(row, model=label))
    return rows


def _resumed_matrix(matrix_module, path: str, models: list[str], versions: list[str], options: dict):
    """``--resume FILE``: the cells FILE holds are not run again; each new one is appended as its group finishes."""
    from ._resume import appending, read

    def key_of(row: dict):
        return (row.get("model"), row.get("transformers")) if "status" in row and "verdict" in row else None

    done = read(path, [(m, v) for m in models for v in versions], key_of, what="cell(s) already run")
    with appending(path) as write:
        return matrix_module.run(models, versions, done=[matrix_module.Cell.from_dict(row) for row in done.values()],
                                 on_cells=lambda cells: [write(cell.to_dict()) for cell in cells], **options)


def _diff(result, before: str, after: str, fmt: str) -> int:
    """``--diff A B``: a row per model, its verdict under A and under B and how it moved."""
    from ..matrix_diff import diff, markdown

    changes = diff(result, before, after)
    if fmt == "json":
        emit(json.dumps({"before": before, "after": after, "changes": [c.to_dict() for c in changes], "matrix": result.to_dict()}, indent=2))
    elif fmt == "markdown":
        emit(markdown(changes))
    else:
        from rich.table import Table

        table = Table(header_style="bold", title=f"transformers {before} -> {after}")
        for column in ("model", "change", f"transformers {before}", f"transformers {after}"):
            table.add_column(column, overflow="fold")
        for change in changes:
            table.add_row(change.model, ("[red]" + change.change + "[/]") if change.worse else change.change, change.before, change.after)
        stdout().print(table)
    worse = [c.model for c in changes if c.worse]
    stderr().print(f"{len(worse)} of {len(changes)} model(s) worse under transformers {after}" + (f": {', '.join(worse)}" if worse else ""), highlight=False)
    if all(c.change == "not compared" for c in changes):
        return ExitCode.COULD_NOT_RUN
    return ExitCode.FINDINGS if worse else ExitCode.CLEAN


def _native(paths, transformers_versions, max_versions, match, tasks, fmt, jobs, executor=None) -> int:
    from .. import matrix_native
    from ..errors import InvalidOptionError

    if paths:
        raise InvalidOptionError("--native compares transformers' own classes: it takes no PATH", "drop the paths")
    if not transformers_versions:
        raise InvalidOptionError("which releases? none given", "pass --transformers A,B")
    versions = versions_from(transformers_versions, max_versions)
    with progress(f"Scanning every auto-mapped class under {len(versions)} transformers release(s)", after=0.5):
        diff = matrix_native.run(versions, match=match, tasks=tasks, jobs=jobs, executor=executor)
    if fmt == "json":
        emit(json.dumps(diff.to_dict(), indent=2))
    elif fmt == "markdown":
        emit(matrix_native.markdown(diff))
    else:
        from rich.table import Table

        table = Table(header_style="bold", title=f"classes whose verdict differs ({len(diff.changed)} of {len(diff.verdicts)})")
        table.add_column("class", overflow="fold")
        for version in versions:
            table.add_column(f"transformers {version}", overflow="fold")
        for label in diff.changed:
            table.add_row(label, *(diff.verdicts[label].get(v, "absent") for v in versions))
        stdout().print(table)
    for version, why in diff.errors.items():
        stderr().print(f"transformers {version}: {why}", highlight=False)
    stderr().print(", ".join(f"transformers {v}: {s:.0f} s" for v, s in diff.seconds.items()), highlight=False)
    if len(diff.errors) == len(versions):
        return ExitCode.COULD_NOT_RUN
    return ExitCode.FINDINGS if diff.changed else ExitCode.CLEAN

