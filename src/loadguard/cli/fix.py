"""``loadguard fix MODEL --out DIR``: write the per-model source change a broken load needs, proven on both sides of v5."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .._infra import Markup, styled
from ..errors import InvalidOptionError, LoadguardError, hint_for
from ..report import FixStatus
from ._common import ExitCode, note, progress, quiet_transformers
from ._limits import did_not_finish, memory_limit, memory_limit_option
from ._options import executor_option, format_option, workaround_option, workarounds_from_option
from ._output import write

DEFAULT_TIMEOUT = 900.0
"""Seconds one model's fix may take when ``--timeout`` is not given: a ``generate`` that never ends ends here."""


@click.command()
@click.argument("paths", nargs=-1, metavar="[MODEL]...")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, resolve_path=True),
    metavar="DIR",
    help="Where the fixed copy goes (new or empty; with several models or --from, one subfolder per model).",
)
@click.option(
    "--from",
    "from_file",
    default=None,
    metavar="FILE",
    help="A file with one model folder or Hub id per line (# comments).",
)
@click.option(
    "--trust-remote-code",
    is_flag=True,
    help="Run the model's own code (read it first): fix runs it in each load (the audit, the proofs).",
)
@click.option(
    "--auto-class", default=None, metavar="NAME", help="Auto class or model class; default: the one the config names."
)
@workaround_option(
    "What the original's load may use; each one it needed becomes a source edit, the fixed copy needs none"
)
@workarounds_from_option()
@click.option(
    "--no-verify",
    "no_verify",
    is_flag=True,
    help="Write the change without proving it (faster; the output and LOADGUARD_FIX.md say it is unverified).",
)
@click.option(
    "--no-weights",
    "no_weights",
    is_flag=True,
    help="Fix without the weights (a folder without them is fixed so anyway): a Hub id fetches code and config only; "
    "the findings are a scan's and the proofs run without weights.",
)
@format_option(
    "json", "markdown", help="json: each change with its findings and proofs; markdown: the pull-request description."
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Models fixed at once (a fleet: each in a child process of its own).",
)
@click.option(
    "--copy-weights",
    is_flag=True,
    help="Copy the weights into the fixed copy (default: hard links, or symbolic links across file systems: no space, "
    "but a program writing a hard-linked file in place changes the original's, a Hub cache blob included).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, None),
    default=None,
    metavar="SECONDS",
    help=f"Seconds one model's fix may take, its proofs included (default: {DEFAULT_TIMEOUT:g}, as scan and matrix); "
    "past it, its child process and everything it started is stopped and the model's row (one model: the error) says "
    "so.",
)
@memory_limit_option(
    "Memory one model's fix may add (e.g. 8GB); auto: 80% of this machine's memory shared among --jobs in a "
    "fleet, none for one model."
)
@executor_option
def fix(
    paths,
    out,
    from_file,
    trust_remote_code,
    auto_class,
    workarounds,
    no_verify,
    no_weights,
    fmt,
    jobs,
    copy_weights,
    timeout,
    memory,
    executor,
):
    """Write a copy of MODEL whose code loads right on transformers 5, with LOADGUARD_FIX.md and loadguard-fix.diff.

    The copy is proven before it is written: it loads with leftover memory poisoned and no workaround on this
    transformers, and loads to the same tensors as the original on transformers 4.57. MODEL is never written; its
    weights are linked, never copied.

    Without weights (a folder of code and config, a Hub id with --no-weights), the change comes from a scan and both
    proofs run without weights (the output says so).

    The model's code runs only in a child process of loadguard's (one per model), which ends with everything it
    started; what it changes there (its working folder, signal handlers) is not this run's, and a child that exits
    before it gave its result is an error, never a success.

    Exit code 0: fixed (or nothing to fix); 1: something is left for a person, a proof failed, or written unproven
    (--no-verify); 2: could not run; 3: a fleet where some models could not be fixed.
    """
    from .._infra import forks
    from .scan import model_targets

    targets = model_targets(paths, from_file)
    asked_timeout, timeout = timeout, timeout if timeout is not None else DEFAULT_TIMEOUT  # a generate that never ends
    chosen = list(workarounds)  # the rule of every command: auto unless told (--workaround none: nothing)

    def _item(target: str, into: str) -> tuple:  # what one model's child is given (_fix_item unpacks it)
        return (target, into, trust_remote_code, auto_class, chosen, not no_verify, not no_weights, copy_weights)

    limit = memory_limit(memory, jobs, len(targets) > 1 or bool(from_file))
    if len(targets) == 1 and not from_file:
        from .._files import missing

        refused = missing(targets[0])  # answered before torch is imported
        if refused is not None:
            raise refused
        item = _item(targets[0], str(out))
        if not forks.available():  # no fork here (not Linux/macOS): in this process, no limit holds
            if asked_timeout is not None or limit is not None:
                raise InvalidOptionError(
                    "--timeout and --memory-limit need os.fork, which this system lacks", "leave them out"
                )
            result = _one(item[0], Path(out), *item[2:])
        else:
            try:
                (outcome,) = executor.map(
                    _fix_item, [item], jobs=1, timeout=timeout, memory_limit=limit, prepare=_prepare
                )
            finally:  # a child stopped past a limit or by a signal could not remove its staging folder: done here
                _staging_removed(Path(out).parent)
            result = _single(targets[0], outcome)
        write(fmt, _Fixed([result]))
        return ExitCode.CLEAN if result.ok else ExitCode.FINDINGS
    taken: set[str] = set()
    items = [_item(target, str(Path(out) / _subfolder(target, taken))) for target in targets]
    note(f"fixing {len(items)} models into {out} ({executor.name}, {jobs} at a time)")
    try:
        outcomes = executor.map(_fix_item, items, jobs=jobs, timeout=timeout, memory_limit=limit, prepare=_prepare)
    finally:
        _staging_removed(Path(out))
    results = [
        o.value if o.ok else _Failed(target, f"its process failed: {o.error}", "")
        for (target, *_), o in zip(items, outcomes)
    ]
    write(fmt, _Fixed(results))
    if any(isinstance(r, _Failed) for r in results):
        return ExitCode.PARTIAL
    return ExitCode.CLEAN if all(r.ok for r in results) else ExitCode.FINDINGS


def _staging_removed(parent: Path) -> None:
    from .._fix import remove_stale

    remove_stale(parent)


def _single(target: str, outcome) -> Any:
    """The one model's result from its child, or the error it could not run with (exit 2): raised, as ``_one`` would
    have raised it here; a child that ended without a result (killed past a limit, or the model's code exited it)."""
    if not outcome.ok:
        raise did_not_finish(
            f"{target}: the fix",
            outcome,
            "the model's code may end its process (os._exit, a crash): run it again with LOADGUARD_DEBUG=1",
        )
    if isinstance(outcome.value, _Failed):
        raise LoadguardError(outcome.value.message, outcome.value.hint or None)
    return outcome.value


def _subfolder(target: str, taken: set[str]) -> str:
    """A subfolder name of its own for each model of a fleet: the folder's name (``parent-name``, then a number, when two
    share it), or the Hub id with ``--`` for ``/``."""
    from .._files import exists

    path = Path(target)
    candidates = [path.name, f"{path.parent.name}-{path.name}"] if exists(target) else [target.replace("/", "--")]
    names = [re.sub(r"[^A-Za-z0-9._-]", "_", c).lstrip(".") or "model" for c in candidates]
    chosen = next((n for n in names if n not in taken), None)
    index = 2
    while chosen is None:
        chosen = f"{names[0]}-{index}" if f"{names[0]}-{index}" not in taken else None
        index += 1
    taken.add(chosen)
    return chosen


def _prepare() -> None:
    """Before a fleet's children are forked: torch, transformers and the fix imported once."""
    import transformers  # noqa: F401

    from .._fix import fix as _fix_module  # noqa: F401

    quiet_transformers()


def _fix_item(item: tuple) -> Any:
    """One model of a fleet, in its own child: its FixResult, or a row saying why it could not run."""

    target, out, trust_remote_code, auto_class, workarounds, verify, weights, copy_weights = item
    try:
        return _one(target, Path(out), trust_remote_code, auto_class, workarounds, verify, weights, copy_weights)
    except LoadguardError as error:
        _debug()
        return _Failed(target, error.message, hint_for(error, "cli") or "")
    except Exception as error:  # one model that cannot run is a row, not the end of the fleet
        _debug()
        return _Failed(target, f"{type(error).__name__}: {error}", "set LOADGUARD_DEBUG=1 and fix it alone to see why")


def _debug() -> None:
    """``LOADGUARD_DEBUG=1``: the traceback, printed where it happened (the child), before it becomes a row."""
    import os
    import traceback

    if os.environ.get("LOADGUARD_DEBUG", "") not in ("", "0"):
        traceback.print_exc()


def _one(
    target: str,
    out: Path,
    trust_remote_code: bool,
    auto_class,
    workarounds,
    verify: bool,
    weights: bool = True,
    copy_weights: bool = False,
):
    from .._fix import fix as run_fix
    from .._fix import holds_weights, model_folder

    folder = model_folder(target, weights)
    quiet_transformers()
    how = "loading" if weights and holds_weights(folder) else "scanning (no weights)"
    with progress(f"Fixing {target}: {how}, patching, proving on two transformers"):
        return run_fix(
            folder,
            out,
            trust_remote_code=trust_remote_code,
            workarounds=workarounds,
            auto_class=auto_class,
            verify=verify,
            weights=weights,
            name=target,
            copy_weights=copy_weights,
        )


_HELD = {
    "hard-linked": "hard links to the original's files: a program that writes them in place changes the original "
    "(a Hub cache blob too)",
    "symlinked": "symbolic links to the original's files (another file system): moving or deleting the original breaks "
    "them",
}


@dataclass(frozen=True)
class _Failed:
    """A model of a fleet that could not be fixed at all (not found, would not load): why, and what to do."""

    model: str
    message: str
    hint: str
    ok = False

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "status": "could_not_run",
            "ok": False,
            "error": {"message": self.message, "hint": self.hint or None},
        }


@dataclass(frozen=True)
class _Fixed:
    results: list
    command = "fix"

    def document(self):
        documents = [r.to_dict() for r in self.results]
        return documents[0] if len(documents) == 1 else documents

    def markdown(self) -> str:
        from .._fix import notes
        from .._infra import inert

        return "\n\n".join(
            notes(r)
            if not isinstance(r, _Failed)
            else f"# {inert(r.model)}\n\ncould not run: {inert(r.to_dict()['error']['message'])}\n"
            for r in self.results
        )

    def table(self, out, err) -> None:
        from rich.table import Table

        if len(self.results) > 1:
            grid = Table("model", "status", "changes", "left for a person", "why")
            for r in self.results:
                data = r.to_dict()
                why = (
                    data["error"]["message"]
                    if isinstance(r, _Failed)
                    else "; ".join(p["detail"] for p in data["proofs"] if p["ok"] is False)
                )
                grid.add_row(
                    r.model,
                    data["status"],
                    str(len(data.get("changes", []))),
                    str(len(data.get("refused", []))),
                    why if len(why) <= 120 else why[:119] + "…",  # the whole of it: --format json
                )
            out.print(grid)
            return
        _print_one(self.results[0], out, err)


def _print_one(result, out, err) -> None:
    if isinstance(result, _Failed):  # a list of one model that could not run: its row, as a fleet says it
        out.print(styled("{}: {}", result.model, Markup("[bold red]could not run[/]")), highlight=False)
        out.print(f"  {result.message}", highlight=False)
        if result.hint:
            err.print(f"Hint: {result.hint}", highlight=False)
        return

    headline = {
        FixStatus.FIXED: "[bold green]fixed[/]",
        FixStatus.PARTLY: "[bold yellow]partly fixed[/]",
        FixStatus.NOT_FIXED: "[bold red]not fixed[/]",
        FixStatus.CLEAN: "[bold green]clean[/]: the load was right, nothing to change",
        FixStatus.UNVERIFIED: "[bold yellow]written, not proven[/]",
    }
    out.print(
        styled("{}: {}{}", result.model, Markup(headline[result.status]), f" -> {result.out}" if result.out else ""),
        highlight=False,
    )
    if result.status == FixStatus.CLEAN and result.checked:
        out.print(f"  {result.checked}", highlight=False)
    verb = "changed" if result.out else "would change (not written)"
    for change in result.changes:
        out.print(f"  {verb} {change.file}: {change.description}", highlight=False)
    for refusal in result.refused:
        where = f" [at {refusal.location}]" if refusal.location else ""
        out.print(
            f"  left for a person: {refusal.tensor + ': ' if refusal.tensor else ''}{refusal.reason}{where}",
            highlight=False,
        )
    if result.upstream:
        out.print(
            '  the change transformers itself needs: --format json\'s "upstream" diff, or `loadguard audit MODEL --reproducer DIR`',
            highlight=False,
        )
    for proof in result.proofs:
        mark = Markup({True: "[green]passed[/]", False: "[red]FAILED[/]", None: "[yellow]not run[/]"}[proof.ok])
        where = f"proof on transformers {proof.transformers}" if proof.transformers else "check"
        out.print(
            styled("  {}, {}: {}: {}", where, proof.name.replace("_", " "), mark, proof.said),
            highlight=False,
        )
    if result.unrun:
        out.print(
            f"  lines of the change no proof ran: {', '.join(result.unrun[:8])}"
            + (f" and {len(result.unrun) - 8} more" if len(result.unrun) > 8 else ""),
            highlight=False,
        )
    if result.status == FixStatus.UNVERIFIED and not result.proofs:
        err.print("Warning: written with --no-verify: not proven on either side of v5", highlight=False)
    if result.weightless:
        err.print(
            "Note: no weights: the findings are a scan's and the proofs ran without weights ((c): synthetic weights on both sides)",
            highlight=False,
        )
    if result.out:
        err.print(f"wrote {result.out}/LOADGUARD_FIX.md and loadguard-fix.diff", highlight=False)
        from .._files import HUB_ID
        from .._fix import PROPOSE, model_name

        if (Path(result.out) / PROPOSE).is_file():
            first = "" if HUB_ID.match(model_name(result)) else "set REPO_ID to the model's Hub id, then "
            err.print(
                f"to open the pull request on the Hub, {first}run: {shlex.join(['sh', str(Path(result.out) / PROPOSE)])}",
                highlight=False,
            )
        said = _HELD.get(result.weights)
        if said:
            err.print(f"its weights are {said} (--copy-weights copies them)", highlight=False)
    elif result.diff:
        err.print('the attempted change was not written: --format json has it ("diff")', highlight=False)
