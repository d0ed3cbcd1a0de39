"""Fleets: many models scanned, each in a child forked for it alone from a process that imported torch, transformers and
loadguard once (:mod:`loadguard._infra.forks`), ``jobs`` at a time, each stopped past its ``timeout`` or ``memory_limit``.
What ``loadguard scan A B C`` / ``--from FILE`` runs, and :func:`scan_many` in Python.

Example::

    rows = loadguard.scan_many(["./model-a", "org/model-b"], trust_remote_code=True, jobs=2)
    for row in rows:
        print(row.model, "clean" if row.ok else [f.tensor for f in row.failures] or row.error)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from .._infra import fingerprint
from ..errors import LoadguardError, hint_for
from ..formats import Row
from ..report import failing

DEFAULT_TIMEOUT = 900.0


def _quiet() -> None:
    """In a fleet's child (its own process): transformers' progress bars and load reports off."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def scan_row(target: str, options: dict) -> dict:
    """One model's scan as JSON-able data: the report, or why it could not be scanned."""
    from .. import workarounds as registry
    from .._hf import return_freed_memory
    from .scanning import scan

    _quiet()
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
            follow_links=options.get("follow_links", False),
            revision=options.get("revision"),
            assume_checkpoint=options.get("assume_checkpoint", "saved"),
            **options.get("placement", {}),
        )
    except LoadguardError as error:
        return _error_row(target, error)
    except Exception as error:  # a model's code failing in a way nothing translated: a row, not an abort
        return {
            "model": target,
            "scanned": False,
            "error": f"unexpected {type(error).__name__}: {error}",
            "hint": "set LOADGUARD_DEBUG=1 and scan it alone",
            "fixes": [],
            "error_kind": type(error).__name__,
        }
    return {"model": target, "scanned": True, **report.to_dict(), "files_sha256": fingerprint(target)}


def trustworthy(row: dict) -> bool:
    """Whether a ``--resume`` row of a scanned model can stand for a scan now: its checks' failure counts are its
    findings' (a row claiming "4 of 4 failed" with no finding is forged or damaged), and a local folder's files are
    the ones it was scanned with (``files_sha256``: edited, re-downloaded or replaced since, it is done again)."""
    findings = row.get("findings") or []
    for check in row.get("checks") or []:
        if check.get("failed") != len(failing([f for f in findings if f.get("check") == check.get("check")])):
            return False
    if any(f.get("check") not in {c.get("check") for c in row["checks"]} for f in failing(findings)):
        return False
    return row.get("files_sha256") == fingerprint(row["model"])


def _error_row(target: str, error) -> dict:
    """The row of a model whose scan ended with a :class:`loadguard.LoadguardError`."""

    return {
        "model": target,
        "scanned": False,
        "error": error.message,
        "hint": hint_for(error, "cli"),
        "fixes": list(error.fixes),
        "error_kind": type(error).__name__,
    }


def _answered_here(targets: list[str]) -> dict[int, dict]:
    """Rows that need no model code, answered in this process (a path that does not exist: one ``stat``, not a child)."""
    from .._files import missing

    return {
        index: _error_row(target, error)
        for index, target in enumerate(targets)
        if (error := missing(target)) is not None
    }


def _scan_in_fresh_interpreter(target: str, options: dict) -> dict:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return scan_row(target, options)


def _scan_in_child(item: tuple[str, dict]) -> dict:
    return scan_row(*item)


def _row(target: str, outcome, timeout: float | None) -> dict:
    """One model's row from its child's outcome: the scan's, or why the child did not finish."""
    row = _outcome_row(target, outcome, timeout)
    if (
        outcome.left_behind
    ):  # the model's code started processes and left them running: they were killed, and the row says so
        row = {**row, "left_behind": outcome.left_behind}
    return row


def _outcome_row(target: str, outcome, timeout: float | None) -> dict:
    from .scanning import OVER_MEMORY_HINT

    if outcome.ok:
        return outcome.value
    kind = "ChildDied"
    if outcome.killed == "memory":
        hint, kind = OVER_MEMORY_HINT, "MemoryLimitExceeded"
    elif outcome.killed == "timeout":
        kind = "TimeoutExceeded"
        hint = (
            f"raise --timeout (now {timeout:g} s) if the model is only slow; code that waits forever (a download, a "
            "lock, input) never finishes"
        )
    else:
        hint = "scan it alone with LOADGUARD_DEBUG=1 to see why"
    return {
        "model": target,
        "scanned": False,
        "error": f"its scan did not finish: {outcome.error}",
        "hint": hint,
        "fixes": [],
        "error_kind": kind,
    }


def _prepare() -> None:
    """Before the children are forked (here, or on a Ray worker): torch, transformers and the scan imported, and a first
    scan's work done, once (:mod:`loadguard._scan.warmup`)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import transformers  # noqa: F401
    from transformers import PreTrainedModel  # noqa: F401

    from .scanning import scan as _scan_module  # noqa: F401
    from .warmup import warm

    warm()  # what a first scan builds (imports, transformers' tables, the self-check) built here, not in every child


def scan_fleet(
    targets: list[str],
    options: dict,
    jobs: int,
    timeout: float | None = DEFAULT_TIMEOUT,
    limit: int | None = None,
    on_done=None,
    on_row=None,
    executor=None,
) -> list[dict]:
    """Each target in a child forked for it alone from a process that imports torch, transformers and loadguard once
    (:mod:`loadguard._infra.forks`; on a Ray worker with ``executor`` ray), ``jobs`` at a time; a child that hangs past
    ``timeout``, grows past ``limit`` bytes or dies is a row saying so. Where fork is not available: fresh interpreters.
    Results in the order of ``targets``; ``on_row(index, row)`` gets each row as it finishes (to stream them),
    ``on_done(index, outcome)`` each outcome."""
    from .._infra import forks
    from ..executors import resolve

    if executor is None and not forks.available():
        rows = scan_fleet_spawned(targets, options, jobs)
        for index, row in enumerate(rows):
            if on_row:
                on_row(index, row)
        return rows

    rows: dict[int, dict] = {}

    def report(index: int, row: dict, outcome) -> None:
        rows[index] = row  # once, as it finishes: streamed, then returned
        if on_row:
            on_row(index, row)
        if on_done:
            on_done(index, outcome)

    for index, row in _answered_here(targets).items():
        report(index, row, forks.Outcome(True, row))
    todo = [index for index in range(len(targets)) if index not in rows]
    if todo:
        resolve(executor).map(
            _scan_in_child,
            [(targets[index], options) for index in todo],
            jobs=jobs,
            timeout=timeout,
            memory_limit=limit,
            on_done=lambda position, outcome: report(
                todo[position], _row(targets[todo[position]], outcome, timeout), outcome
            ),
            prepare=_prepare,
        )
    return [rows[index] for index in range(len(targets))]


def scan_fleet_spawned(targets: list[str], options: dict, jobs: int) -> list[dict]:
    """Each target in a fresh interpreter (spawned, importing torch and transformers anew), ``jobs`` at a time."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
        futures = [pool.submit(_scan_in_fresh_interpreter, target, options) for target in targets]
        return [future.result() for future in futures]


def scan_many(
    targets: Iterable[str],
    *,
    trust_remote_code: bool = False,
    auto_class: str | None = None,
    dtype: str | None = None,
    keys: str = "auto",
    workarounds: Sequence[str] = (),
    jobs: int = 1,
    timeout: float | None = DEFAULT_TIMEOUT,
    memory_limit: int | None = None,
    executor: str | None = None,
    **from_pretrained: Any,
) -> list[Row]:
    """Scan every model folder or Hub id in ``targets`` (as ``loadguard scan``), each in a child process of its own;
    one :class:`loadguard.formats.Row` per target, in order: its predicted findings, or why it could not be scanned
    (``row.error``, ``row.hint``). ``memory_limit``: bytes one model's scan may add (None: no limit). ``executor``:
    ``"local"`` (the default) or ``"ray[:ADDRESS]"`` (:func:`loadguard.executors.resolve`)."""
    options = {
        "placement": dict(from_pretrained),
        "trust_remote_code": trust_remote_code,
        "auto_class": auto_class,
        "dtype": dtype,
        "keys": keys,
        "workarounds": list(workarounds),
        "workaround_files": [],
    }
    return [
        Row.from_scan(row)
        for row in scan_fleet(list(targets), options, jobs, timeout, memory_limit, executor=executor)
    ]


__all__ = ["DEFAULT_TIMEOUT", "scan_fleet", "scan_many"]
