"""``matrix``: which transformers versions break a model, and at which a workaround stops being needed.

Each (model, version) cell runs in a fresh interpreter of that version's environment (:mod:`loadguard._infra.envs`):
``loadguard scan`` (no weights needed, so a cell costs seconds), or with ``full=True`` a full ``loadguard audit``
of a local checkpoint. This module only collects their JSON: the findings schema is the scan's / audit's own,
so two matrices can be diffed.

Example::

    result = loadguard.matrix(["./minicpmv_like"], ["4.57.6", "5.24.0"], workarounds=["auto", "minicpmv-pos-cache"],
                              trust_remote_code=True)
    result.cell("./minicpmv_like", "5.24.0").failures      # ['resampler.pos_embed']
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.version import Version

from .. import _files
from .. import workarounds as registry
from .._infra import envs
from ..errors import InvalidOptionError
from ..executors import resolve, split
from ..report import CellStatus, WorkaroundStatus, failing


@dataclass(frozen=True)
class Cell:
    """One model under one transformers version: ``status`` is ``clean``, ``findings``, ``error`` (the model
    could not be scanned: ``error``/``hint``) or ``unavailable`` (the version could not be installed here)."""

    model: str
    transformers: str
    status: CellStatus
    report: dict | None = None
    error: str = ""
    hint: str = ""
    seconds: float = 0.0
    ran_with: dict = field(default_factory=dict)
    """What the cell's worker really imported: ``{"transformers": ..., "torch": ...}`` (empty when it did not run)."""

    @property
    def failures(self) -> list[str]:
        if self.report is None:
            return []
        return [f["tensor"] for f in failing(self.report["findings"])]

    def verdict(self) -> str:
        """What a reader compares across versions: clean, the failing tensors, or why it could not run."""
        if self.status in (CellStatus.ERROR, CellStatus.UNAVAILABLE):
            return f"{self.status}: {self.error}"
        if not self.failures:
            return "clean"
        return ", ".join(f"{f['tensor']} ({f['status']})" for f in failing(self.report["findings"]))

    def workaround(self, name: str) -> str:
        """``needed``, ``stale``, ``not applicable`` or ``unknown`` (the cell did not run)."""
        if self.report is None:
            return "unknown"
        for outcome in self.report.get("workarounds", []):
            if outcome["name"] == name:
                return {
                    WorkaroundStatus.APPLIED: WorkaroundStatus.NEEDED,
                    WorkaroundStatus.NEEDED: WorkaroundStatus.NEEDED,
                    WorkaroundStatus.STALE: WorkaroundStatus.STALE,
                    WorkaroundStatus.NOT_APPLICABLE: "not applicable",
                }.get(outcome["status"], outcome["status"])
        return "not applicable"

    @classmethod
    def from_dict(cls, data: dict) -> Cell:
        """The cell :meth:`to_dict` wrote (``verdict`` is recomputed, not read)."""
        return cls(
            data["model"],
            data["transformers"],
            CellStatus(data["status"]),
            data.get("report"),
            data.get("error") or "",
            data.get("hint") or "",
            data.get("seconds", 0.0),
            data.get("ran_with") or {},
        )

    @classmethod
    def valid(cls, data: dict) -> bool:
        """Whether ``data`` is a cell of the shape :meth:`to_dict` writes, which every output can show (``--resume``)."""
        try:
            cell = cls.from_dict(data)
            cell.to_dict()
        except Exception:
            return False
        known = cell.status in (CellStatus.CLEAN, CellStatus.FINDINGS, CellStatus.ERROR, CellStatus.UNAVAILABLE) and (
            cell.status in (CellStatus.ERROR, CellStatus.UNAVAILABLE) or isinstance(cell.report, dict)
        )
        return known and all(
            isinstance(v, t)
            for v, t in ((cell.error, str), (cell.hint, str), (cell.seconds, (int, float)), (cell.ran_with, dict))
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "transformers": self.transformers,
            "status": self.status,
            "verdict": self.verdict(),
            "report": self.report,
            "error": self.error or None,
            "hint": self.hint or None,
            "seconds": round(self.seconds, 2),
            "ran_with": self.ran_with or None,
        }


@dataclass(frozen=True)
class Matrix:
    models: tuple[str, ...]
    versions: tuple[str, ...]
    cells: tuple[Cell, ...]
    environments: tuple[envs.Environment, ...]
    workarounds: tuple[str, ...] = ()
    mode: str = "scan"
    seconds: dict = field(default_factory=dict)
    selfchecks: dict = field(default_factory=dict)
    """Per version (scan mode): the scan's self-check there, ``{"ok", "seconds", "differing", "cached"}`` or
    ``{"ok": False, "error": ...}`` when it could not run."""

    def cell(self, model: str, version: str) -> Cell:
        return next(c for c in self.cells if c.model == model and c.transformers == version)

    def workaround_rows(self) -> list[tuple[str, str, dict[str, str]]]:
        """(model, workaround, {version: needed/stale/not applicable/unknown}) for every named workaround."""
        return [
            (m, w, {v: self.cell(m, v).workaround(w) for v in self.versions})
            for m in self.models
            for w in self.workarounds
        ]

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "models": list(self.models),
            "transformers": list(self.versions),
            "environments": [{**e.to_dict(), "selfcheck": self.selfchecks.get(e.version)} for e in self.environments],
            "cells": [c.to_dict() for c in self.cells],
            "workarounds": [
                {"model": m, "workaround": w, "transformers": row} for m, w, row in self.workaround_rows()
            ],
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
        }


def cell_options(
    trust_remote_code: bool,
    workarounds: Sequence[str],
    workaround_files: Sequence[str],
    auto_class: str | None,
    keys: str,
) -> list[str]:
    args = ["--trust-remote-code"] if trust_remote_code else []
    args += [f"--workaround={w}" for w in workarounds] + [f"--workarounds-from={f}" for f in workaround_files]
    if auto_class:
        args += ["--auto-class", auto_class]
    return args + ([f"--keys={keys}"] if keys else [])


def applicable(model: str, workarounds: Sequence[str], workaround_files: Sequence[str] = ()) -> list[str]:
    """The named workarounds that apply to ``model`` (read from its local config.json; all of them for a Hub id):
    a matrix asks one list of every model, and one that does not apply is "not applicable", not an error."""

    for file in workaround_files:
        registry.load_file(file)
    config = _files.local_config(model)
    if config is None:
        return list(workarounds)
    return [w for w in workarounds if w == registry.AUTO or registry.get(w).applies(config)]


def _arguments(model: str, full: bool, options: list[str]) -> list[str]:
    """A cell's command: options first, then ``--`` and the model, so a model path that starts with '-' is a path."""
    if full:
        return ["audit", "--format", "json", *(o for o in options if not o.startswith("--keys")), "--", model]
    return ["scan", "--format", "json", *options, "--", model]


def _cell(model: str, version: str, full: bool, result: dict, seconds: float) -> Cell:
    """A cell from a command's exit code and output."""
    if result["returncode"] in (0, 1) and result["stdout"].strip():
        document = json.loads(result["stdout"] if full else result["stdout"].strip().splitlines()[0])
        if not full and not document.get("scanned", True):
            return Cell(model, version, "error", None, document["error"], document["hint"], seconds)
        clean = not failing(document["findings"])
        return Cell(model, version, CellStatus.CLEAN if clean else CellStatus.FINDINGS, document, seconds=seconds)
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    error = next(
        (line[len("Error: ") :] for line in lines if line.startswith("Error: ")),
        lines[-1] if lines else f"exit {result['returncode']}",
    )
    hint = next((line[len("Hint: ") :] for line in lines if line.startswith("Hint: ")), "")
    return Cell(model, version, CellStatus.ERROR, None, error, hint, seconds)


def environment_selfcheck(worker: envs.Worker) -> dict:
    """The scan's self-check in the worker's environment (its record when there is one), summarized."""
    result = worker.run(["selfcheck", "--cached", "--format", "json"])
    try:
        document = json.loads(result["stdout"])
    except ValueError:
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        return {"ok": False, "error": lines[-1] if lines else f"exit {result['returncode']}"}
    differing = [f"{case['entry']}: {line}" for case in document["cases"] for line in case["differing"]]
    return {"ok": document["ok"], "seconds": document["seconds"], "cached": document["cached"], "differing": differing}


def _run_in(
    environment: envs.Environment,
    cells: list[tuple[str, list[str]]],
    full: bool,
    checks: dict | None = None,
    limits: dict | None = None,
) -> list[Cell]:
    """Cells ``(model, options)`` of one environment, through one worker; in scan mode the scan's self-check runs
    there first (into ``checks``), and a failed one is every cell's error (the scans refuse there)."""
    if not environment.ok:
        return [
            Cell(model, environment.version, CellStatus.UNAVAILABLE, error=environment.reason) for model, _ in cells
        ]
    try:
        worker = envs.Worker(environment)
    except RuntimeError as error:
        return [
            Cell(model, environment.version, CellStatus.UNAVAILABLE, error=f"the environment does not start: {error}")
            for model, _ in cells
        ]
    out = []
    try:
        if not full:
            check = environment_selfcheck(worker)
            if checks is not None:
                checks[environment.version] = check
        for model, options in cells:
            start = time.perf_counter()
            result = worker.run(_arguments(model, full, options), limits)
            out.append(
                dataclasses.replace(
                    _cell(model, environment.version, full, result, time.perf_counter() - start),
                    ran_with=worker.versions,
                )
            )
    finally:
        worker.close()
    return out


def matrix(
    models: Sequence[str],
    versions: Sequence[str],
    *,
    full: bool = False,
    workarounds: Sequence[str] = (),
    workaround_files: Sequence[str] = (),
    trust_remote_code: bool = False,
    auto_class: str | None = None,
    keys: str = "auto",
    jobs: int = 1,
    limits: dict | None = None,
    executor=None,
    done: Sequence[Cell] = (),
    on_cells=None,
) -> Matrix:
    """Every model under every version (``loadguard.matrix(...)``; ``loadguard matrix`` on the command line):
    environments created (or reused) first, then each environment's cells through its worker, ``jobs`` environments
    at a time, on ``executor`` (``"local"``, the default, or ``"ray[:ADDRESS]"``: each node builds an environment once
    per version and reuses it). ``done``: cells of an earlier run (``--resume``), not run again; ``on_cells(cells)`` as
    each group of cells finishes. The :class:`Matrix` is what ``--format json`` prints (:meth:`Matrix.to_dict`)."""

    start = time.perf_counter()
    per_model = {
        m: cell_options(
            trust_remote_code,
            applicable(m, workarounds, workaround_files),
            workaround_files,
            auto_class,
            "" if full else keys,
        )
        for m in models
    }
    runner = resolve(executor)
    by_pair: dict = {(c.model, c.transformers): c for c in done if c.model in per_model and c.transformers in versions}
    todo = {v: [m for m in models if (m, v) not in by_pair] for v in versions}
    slots = max(1, runner.slots(jobs) // max(1, sum(1 for v in versions if todo[v])))
    items = [
        (v, [(m, per_model[m]) for m in chunk], full, limits)
        for v in versions
        if todo[v]
        for chunk in split(todo[v], slots)
    ]

    def finished(index: int, outcome) -> None:
        if on_cells is not None and outcome.ok:
            on_cells(outcome.value[1])

    outcomes = runner.map(_environment_cells, items, jobs=jobs, on_done=finished)
    environments, checks = {}, {}
    for (version, cells, _, _), outcome in zip(items, outcomes):
        if outcome.ok:
            environment, ran, check = outcome.value
        else:  # the item itself did not finish (its process died): every cell of it says why
            environment = envs.Environment(version, envs.cache_root(), ok=False, reason=outcome.error)
            ran, check = [Cell(m, version, CellStatus.UNAVAILABLE, error=outcome.error) for m, _ in cells], None
        environments.setdefault(version, environment)
        if check is not None:
            checks.setdefault(version, check)
        by_pair.update({(c.model, c.transformers): c for c in ran})
    cells = [by_pair[(m, v)] for m in models for v in versions]
    names = tuple(w for w in workarounds if w != "auto")
    elapsed = time.perf_counter() - start
    built = sum(e.seconds for e in environments.values() if e.created)
    return Matrix(
        tuple(models),
        tuple(versions),
        tuple(cells),
        tuple(environments[v] for v in versions if v in environments),
        names,
        "audit" if full else "scan",
        {"environments": built, "cells": elapsed, "per_cell": elapsed / max(1, len(cells))},
        {v: checks[v] for v in versions if v in checks},
    )


def _environment_cells(item) -> tuple[envs.Environment, list[Cell], dict | None]:
    """One executor item: a version's environment (created once per machine, under its lock, else reused) and the
    cells of some models in it."""
    version, cells, full, limits = item
    environment = envs.environment(version)
    checks: dict = {}
    return environment, _run_in(environment, cells, full, checks, limits), checks.get(version)


run = matrix
"""The name :func:`matrix` had before ``loadguard.matrix(...)`` was callable."""


@dataclass(frozen=True)
class Bisection:
    model: str
    low: str
    high: str
    first_changed: str | None
    """The first version whose verdict differs from ``low``'s (None: the same all the way to ``high``)."""
    cells: tuple[Cell, ...]
    candidates: int

    @classmethod
    def from_dict(cls, data: dict) -> Bisection:
        """The bisection :meth:`to_dict` wrote, its cells included."""
        return cls(
            data["model"],
            data["low"],
            data["high"],
            data.get("first_changed"),
            tuple(Cell.from_dict(cell) for cell in data.get("cells", ())),
            data["versions_between"],
        )

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "low": self.low,
            "high": self.high,
            "first_changed": self.first_changed,
            "versions_between": self.candidates,
            "cells": [c.to_dict() for c in self.cells],
        }


def bisect(
    model: str,
    low: str,
    high: str,
    *,
    full: bool = False,
    options: Sequence[str] = (),
    executor=None,
    limits: dict | None = None,
) -> Bisection:
    """The first released version between ``low`` and ``high`` at which ``model``'s verdict changes, in
    about log2(n) cells (each version's environment built on demand, where ``executor`` runs the cell; ``limits`` for
    each, as :func:`matrix`'s)."""

    versions = envs.released_versions(f">={low},<={high}")
    if Version(low) not in map(Version, versions) or Version(high) not in map(Version, versions):
        raise InvalidOptionError(
            f"{low} and {high} must both be released transformers versions",
            "run loadguard matrix without --bisect to see what installs",
        )
    versions = [v for v in versions if Version(low) <= Version(v) <= Version(high)]
    seen: dict[str, Cell] = {}

    runner = resolve(executor)

    def cell(version: str) -> Cell:
        if version not in seen:
            outcome = runner.map(_environment_cells, [(version, [(model, list(options))], full, limits)])[0]
            seen[version] = (
                outcome.value[1][0]
                if outcome.ok
                else Cell(model, version, CellStatus.UNAVAILABLE, error=outcome.error)
            )
        return seen[version]

    candidates = len(versions)
    base = cell(versions[0]).verdict()
    if cell(versions[-1]).verdict() == base:
        return Bisection(model, low, high, None, tuple(seen.values()), candidates)
    lo, hi = 0, len(versions) - 1  # verdict(lo) == base, verdict(hi) != base
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if cell(versions[middle]).status == CellStatus.UNAVAILABLE:  # not installable here: decide without it
            del versions[middle]
            hi -= 1
            continue
        if cell(versions[middle]).verdict() == base:
            lo = middle
        else:
            hi = middle
    return Bisection(model, low, high, versions[hi], tuple(seen.values()), candidates)
