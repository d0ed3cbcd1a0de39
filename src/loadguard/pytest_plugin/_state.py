"""The plugin's state: one session per pytest run (a stack: pytester runs sessions inside sessions), what each test
loaded and compared, and the per-test settings (the ``loadguard`` marker over the command-line options)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

POLICIES = ("off", "warn", "fail", "repair")
PATH = re.compile(r"(?:/[\w.@+-]+)+")  # temp folders differ per run: not part of a failure's identity
RUNNER_POLICY = {"off": "off", "warn": "warn", "fail": "raise", "repair": "repair"}


@dataclass
class TestRecord:
    loads: list = field(default_factory=list)  # (report, repair result or None)
    reports: list = field(default_factory=list)  # the reports alone: what the loadguard_report fixture hands out
    comparisons: list = field(default_factory=list)  # payloads of compare events


@dataclass
class Session:
    policy: str = "off"
    poison: bool | None = None
    """Explicitly on or off (``--loadguard-poison``, ``--loadguard-no-poison``, ``[tool.loadguard] poison``); None: as
    the CLI, whose loads are poisoned by default: on for every load the plugin audits (:meth:`poisons`)."""
    record_path: str | None = None
    forward: bool = False
    """``--loadguard-forward``: each audited model is run once after its audit (:func:`loadguard.runner.check_run`)."""
    workarounds: str | tuple = ()
    """The workarounds of a test whose marker names none: ``[tool.loadguard] workarounds`` (``"auto"`` or names)."""
    current: Any = None  # the running test item
    records: dict = field(default_factory=dict)  # nodeid -> TestRecord
    results: dict = field(default_factory=dict)  # nodeid -> what --loadguard-record writes for this process
    loads: list = field(default_factory=list)  # one JSON-able summary per audited load (this process and its workers)
    workers: dict = field(default_factory=dict)  # xdist worker id -> its results (on the controller)
    undo: list = field(default_factory=list)
    installed: bool = False  # the from_pretrained hook: only where a policy, poison or a marker asks for it

    def poisons(self, policy: str) -> bool:
        """Whether a load under ``policy`` runs under :func:`loadguard.poison`: the same evidence as ``loadguard audit``
        (leftover memory is NaN, so the same status word) unless poison was switched off."""
        return self.poison if self.poison is not None else policy != "off"


sessions: list[Session] = []  # a stack: pytester can run a pytest session inside another


def current_session() -> Session:
    return sessions[-1] if sessions else Session()


def marker(item) -> dict:
    """The ``loadguard`` marker's settings for a test (empty without one)."""
    found = item.get_closest_marker("loadguard") if item is not None else None
    return dict(found.kwargs) if found is not None else {}


FIXTURES = frozenset({"loadguard_report", "hf_runner"})


def uses_a_fixture(item) -> bool:
    """Whether the test asks for one of loadguard's fixtures: then it asked for its loads to be checked."""
    return bool(FIXTURES & set(getattr(item, "fixturenames", ()) or ()))


def workarounds_for(item, session: Session | None = None):
    """The workarounds a test's loads run with: its marker's ``workarounds`` (``"auto"``, a name, or a list of them: one
    spelling means the same as the other), else the session's (``[tool.loadguard] workarounds``), else none."""
    settings = marker(item)
    if "workarounds" in settings:
        return settings["workarounds"]
    return (session or current_session()).workarounds


def policy_for(item, session: Session | None = None) -> str:
    """The policy for a test: its marker's, else the session's; a test that asks for a loadguard fixture is checked
    (``fail``) whatever the command line says: ``off`` only keeps the automatic hook away from tests that did not ask."""
    chosen = marker(item).get("policy") or (session or current_session()).policy
    if chosen not in POLICIES:
        raise pytest.UsageError(f"loadguard marker: policy={chosen!r} is not one of {POLICIES}")
    if chosen == "off" and not marker(item).get("policy") and uses_a_fixture(item):
        return "fail"
    return chosen


def on_event(session: Session, event: str, payload: dict) -> None:
    # the vocabulary waits for a load: a pytest run that never loads a model does not import it
    from ..report import Status, WorkaroundStatus

    item = session.current
    if item is None:
        return
    record = session.records.setdefault(item.nodeid, TestRecord())
    if event == "load":
        report, repaired = payload["report"], payload.get("repair")
        record.loads.append((report, repaired))
        # what the fixture hands out: the report of the model as the test holds it (loadguard._audit.loading.held's rule)
        from .._audit import held

        record.reports.append(payload.get("held") or held(report, repaired))
        session.loads.append(
            {
                "model": report.model,
                "ok": report.ok,
                "tensors": [f.tensor for f in report.failures],
                "repaired": None if repaired is None else repaired.ok,
                WorkaroundStatus.STALE: [
                    [w.name, w.detail] for w in report.workarounds if w.status == WorkaroundStatus.STALE
                ],
                Status.INITIALIZED: sum(f.status == Status.INITIALIZED for f in report.findings),
                "not_run": [c.check for c in report.checks if not c.ran],
                "not_run_reason": next((c.reason for c in report.checks if not c.ran), ""),
            }
        )
    elif event == "compare":
        record.comparisons.append(payload)


__all__ = [
    "FIXTURES",
    "POLICIES",
    "PATH",
    "RUNNER_POLICY",
    "Session",
    "TestRecord",
    "current_session",
    "marker",
    "on_event",
    "policy_for",
    "sessions",
    "uses_a_fixture",
    "workarounds_for",
]
