"""``loadguard matrix PATH_OR_ID... --transformers V1,V2,...``: which transformers versions break which models,
and which workarounds each version still needs."""

from __future__ import annotations

from pathlib import Path

import click

from .._infra import Markup
from ..errors import InvalidOptionError
from ..report import CellStatus
from ._common import ExitCode, progress
from ._consoles import stderr
from ._limits import memory_limit, memory_limit_option
from ._matrix_outputs import Bisections, Cells, Changes, NativeChanges
from ._options import executor_option, format_option, workaround_option, workarounds_from_option
from ._output import write

_SPECIFIER = set("<>=!~*")


def versions_from(text: str, max_versions: int | None) -> list[str]:
    """``4.57.6,5.24.0`` (exact versions) or a specifier (``>=5,<5.25``) expanded from the package index."""
    from .._infra import envs

    versions: list[str] = []
    for part in [p.strip() for p in text.split(",") if p.strip()] if not (set(text) & _SPECIFIER) else [text]:
        versions += envs.released_versions(part, max_versions) if set(part) & _SPECIFIER else [part]
    return list(dict.fromkeys(versions))


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--transformers",
    "transformers_versions",
    default=None,
    metavar="VERSIONS",
    help="Comma-separated versions (4.57.6,5.24.0) or a specifier ('>=5,<5.25') expanded from the package index.",
)
@click.option(
    "--max-versions",
    type=click.IntRange(1, 200),
    default=None,
    help="Cap a specifier's versions (spread from oldest to newest).",
)
@click.option(
    "--full", is_flag=True, help="A full audit of each local checkpoint instead of a scan (needs the weights)."
)
@click.option("--trust-remote-code", is_flag=True, help="Run the models' own code (read it first).")
@click.option("--auto-class", default=None, metavar="NAME", help="Auto class or model class for every model.")
@click.option(
    "--keys",
    type=click.Choice(["auto", "header", "complete"]),
    default="auto",
    show_default=True,
    help="Where a scan takes the checkpoint's keys from.",
)
@workaround_option(
    "Apply (or, after load, assess) a registered workaround in every cell; a row per model says where it is needed"
)
@workarounds_from_option(expose=True)
@click.option(
    "--bisect",
    nargs=2,
    default=None,
    metavar="LOW HIGH",
    help="The first version between LOW and HIGH at which each model's verdict changes.",
)
@click.option(
    "--diff",
    "diff_versions",
    nargs=2,
    default=None,
    metavar="A B",
    help="Run versions A and B and say, per model, how the verdict moved (new failure, fixed, changed finding): "
    "exit 1 when any model got worse.",
)
@click.option(
    "--native",
    is_flag=True,
    help="Every class each release's auto mappings register (no PATH): only the classes whose verdict differs between the versions.",
)
@click.option(
    "--match",
    default=None,
    metavar="PATTERN",
    help="With --native: only classes or model types matching a glob or containing a substring.",
)
@click.option(
    "--tasks", default=None, metavar="GLOB", help="With --native: only auto mappings matching (e.g. '*CAUSAL_LM*')."
)
@format_option(
    "json",
    "markdown",
    "sarif",
    "github",
    "junit",
    help="sarif, github, junit: a result per cell, its model named with its transformers version.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Cells at once (each a fresh interpreter).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, None),
    default=900.0,
    show_default=True,
    help="Seconds one cell may take (it runs in a child process, killed past it; its cell says so).",
)
@memory_limit_option(
    "Memory one cell may add (e.g. 4GB); past it, its cell says so; auto: 80% of this machine's memory shared among --jobs."
)
@executor_option
@click.option(
    "--resume",
    "resume_file",
    default=None,
    type=click.Path(dir_okay=False, resolve_path=True),
    metavar="FILE",
    help="Append each cell to FILE (JSON Lines) as it finishes; given FILE from an interrupted run, run only the cells it lacks.",
)
def matrix(
    paths,
    transformers_versions,
    max_versions,
    full,
    trust_remote_code,
    auto_class,
    keys,
    workarounds,
    workarounds_from,
    bisect,
    diff_versions,
    native,
    match,
    tasks,
    fmt,
    jobs,
    timeout,
    memory,
    executor,
    resume_file,
):
    """Scan (or --full: audit) every model under every transformers version, each in its own cached environment.

    Exit 0: every cell clean; 1: findings; 2: could not run; 3: partial (a model could not be scanned under some
    version: its cell says why).
    """
    from .._matrix import matrices as matrix_module
    from ..formats import EMITTED

    if (native or bisect) and fmt in EMITTED:
        raise InvalidOptionError(
            f"--format {fmt} is for a matrix's cells and its --diff",
            "use table, json or markdown with --native or --bisect",
        )
    if native:  # a class's scan keeps its own default (300 s) unless --timeout is given
        given = click.get_current_context().get_parameter_source("timeout") is not click.core.ParameterSource.DEFAULT
        return _native(
            paths,
            transformers_versions,
            max_versions,
            match,
            tasks,
            fmt,
            jobs,
            executor,
            timeout if given else 300.0,
            memory,
        )
    if not paths:
        raise InvalidOptionError("no model given", "pass model folders or Hub ids")
    files = [str(Path(f).resolve()) for f in workarounds_from]
    limits = {"timeout": timeout, "memory_limit": memory_limit(memory, jobs, fleet=True)}  # for every cell
    if bisect:
        options = matrix_module.cell_options(trust_remote_code, workarounds, files, auto_class, "" if full else keys)
        results = []
        for model in paths:
            with progress(f"Bisecting {model} between transformers {bisect[0]} and {bisect[1]}", after=0.5):
                results.append(
                    matrix_module.bisect(
                        model, bisect[0], bisect[1], full=full, options=options, executor=executor, limits=limits
                    )
                )
        write(fmt, Bisections(tuple(results)))
        changed = any(r.first_changed for r in results)
        return ExitCode.FINDINGS if changed else ExitCode.CLEAN
    if diff_versions:
        if transformers_versions:
            raise InvalidOptionError(
                "--diff A B names the two versions: --transformers is not needed with it", "drop --transformers"
            )
        transformers_versions = ",".join(diff_versions)
    if not transformers_versions:
        raise InvalidOptionError(
            "which transformers versions? none given",
            "pass --transformers 4.57.6,5.24.0 (or a specifier), or --bisect LOW HIGH",
        )
    versions = versions_from(transformers_versions, max_versions)
    if not versions:
        raise InvalidOptionError(
            f"no released transformers version matches {transformers_versions!r}", "widen the specifier"
        )
    options = dict(
        full=full,
        workarounds=list(workarounds),
        workaround_files=files,
        trust_remote_code=trust_remote_code,
        auto_class=auto_class,
        keys=keys,
        jobs=jobs,
        limits=limits,
        executor=executor,
    )
    with progress(f"Preparing {len(versions)} environment(s) and {len(versions) * len(paths)} cell(s)", after=0.5):
        if resume_file:
            result = _resumed_matrix(matrix_module, resume_file, list(paths), versions, options)
        else:
            result = matrix_module.run(list(paths), versions, **options)
    if diff_versions:
        return _diff(result, *[versions_from(v, 1)[0] for v in diff_versions], fmt)
    write(fmt, Cells(result))
    if all(c.status == CellStatus.UNAVAILABLE for c in result.cells):
        stderr().print(
            Markup("[bold red]Error:[/] none of the transformers versions could be installed here"), highlight=False
        )
        return ExitCode.COULD_NOT_RUN
    return cells_exit(result.cells)


def cells_exit(cells) -> ExitCode:
    """0 every cell clean; 1 findings; 3 partial: a model could not be scanned under some version (its cell says why),
    as a scan fleet's exit; 2 none could be. A version that could not be installed is its column's reason, not a model's."""
    ran = [c for c in cells if c.status != CellStatus.UNAVAILABLE]
    errors = [c for c in ran if c.status == CellStatus.ERROR]
    if ran and len(errors) == len(ran):
        return ExitCode.COULD_NOT_RUN
    if errors:
        return ExitCode.PARTIAL
    return ExitCode.CLEAN if all(c.status == CellStatus.CLEAN for c in cells) else ExitCode.FINDINGS


def _resumed_matrix(matrix_module, path: str, models: list[str], versions: list[str], options: dict):
    """``--resume FILE``: the cells FILE holds are not run again; each new one is appended as its group finishes."""
    from ._resume import appending, read

    def key_of(row: dict):
        return (row.get("model"), row.get("transformers")) if "status" in row and "verdict" in row else None

    done = read(
        path,
        [(m, v) for m in models for v in versions],
        key_of,
        what="cell(s) already run",
        valid=matrix_module.Cell.valid,
    )
    with appending(path) as append:
        return matrix_module.run(
            models,
            versions,
            done=[matrix_module.Cell.from_dict(row) for row in done.values()],
            on_cells=lambda cells: [append(cell.to_dict()) for cell in cells],
            **options,
        )


def _diff(result, before: str, after: str, fmt: str) -> int:
    """``--diff A B``: a row per model, its verdict under A and under B and how it moved."""
    from .._matrix import diff

    changes = diff(result, before, after)
    write(fmt, Changes(result, before, after, tuple(changes)))
    worse = [c.model for c in changes if c.worse]
    stderr().print(
        f"{len(worse)} of {len(changes)} model(s) worse under transformers {after}"
        + (f": {', '.join(worse)}" if worse else ""),
        highlight=False,
    )
    if all(c.change == "not compared" for c in changes):
        return ExitCode.COULD_NOT_RUN
    return ExitCode.FINDINGS if worse else ExitCode.CLEAN


def _native(
    paths, transformers_versions, max_versions, match, tasks, fmt, jobs, executor=None, timeout=300.0, memory="auto"
) -> int:
    from .._matrix import native as matrix_native

    if paths:
        raise InvalidOptionError("--native compares transformers' own classes: it takes no PATH", "drop the paths")
    if not transformers_versions:
        raise InvalidOptionError("which releases? none given", "pass --transformers A,B")
    versions = versions_from(transformers_versions, max_versions)
    with progress(f"Scanning every auto-mapped class under {len(versions)} transformers release(s)", after=0.5):
        diff = matrix_native.run(
            versions, match=match, tasks=tasks, jobs=jobs, timeout=timeout, memory_limit=memory, executor=executor
        )
    write(fmt, NativeChanges(diff))
    for version, why in diff.errors.items():
        stderr().print(f"transformers {version}: {why}", highlight=False)
    stderr().print(", ".join(f"transformers {v}: {s:.0f} s" for v, s in diff.seconds.items()), highlight=False)
    if len(diff.errors) == len(versions):
        return ExitCode.COULD_NOT_RUN
    return ExitCode.FINDINGS if diff.changed else ExitCode.CLEAN
