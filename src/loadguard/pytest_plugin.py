"""The loadguard pytest plugin: every reference load audited, every comparison fingerprinted.

Options:
  --loadguard=off|warn|fail|repair   audit every ``PreTrainedModel.from_pretrained`` made during the session
                                     (any auto class, any helper): ``fail`` fails the test that loaded a broken
                                     model, naming the tensors; ``repair`` repairs and records (and fails the
                                     test when repair cannot make the model clean); ``warn`` warns.
  --loadguard-poison                 loads inside tests run under ``loadguard.poison()``.
  --loadguard-record=PATH            write per-test outcomes and fingerprints as JSON (used by ``loadguard repeat``),
                                     one section per process that ran tests (``main``, or each pytest-xdist worker).
  --loadguard-workarounds-from=FILE  import a Python file that registers workarounds (repeatable).

Marker: ``@pytest.mark.loadguard(policy="repair", workarounds=["minicpmv-pos-cache"], strict_stale=True)``; its
``before_import`` workarounds (or ``"auto"``) wrap every ``from_pretrained`` of the test. A load that fails
the way a registered workaround fixes gets a note naming it (and the marker that applies it).
Fixtures: ``hf_runner`` (``with hf_runner(path, trust_remote_code=True) as r:``; policy, poison and
workarounds come from the options and marker), ``loadguard_report`` (the audits of the current test's loads).
The patch of ``from_pretrained`` lives for the session only and is undone at its end.

Under pytest-xdist every worker audits its own loads and hands its summary and record to the controller,
so the terminal summary and ``--loadguard-record`` cover every worker.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.abc
import json
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

POLICIES = ("off", "warn", "fail", "repair")
_PATH = re.compile(r"(?:/[\w.@+-]+)+")  # temp folders differ per run: not part of a failure's identity
_RUNNER_POLICY = {"off": "off", "warn": "warn", "fail": "raise", "repair": "repair"}


@dataclass
class _TestRecord:
    loads: list = field(default_factory=list)  # (report, repair result or None)
    reports: list = field(default_factory=list)  # the reports alone: what the loadguard_report fixture hands out
    comparisons: list = field(default_factory=list)  # payloads of compare events


@dataclass
class _Session:
    policy: str = "off"
    poison: bool = False
    record_path: str | None = None
    current: Any = None  # the running test item
    records: dict = field(default_factory=dict)  # nodeid -> _TestRecord
    results: dict = field(default_factory=dict)  # nodeid -> what --loadguard-record writes for this process
    loads: list = field(default_factory=list)  # one JSON-able summary per audited load (this process and its workers)
    workers: dict = field(default_factory=dict)  # xdist worker id -> its results (on the controller)
    undo: list = field(default_factory=list)


_sessions: list[_Session] = []  # a stack: pytester can run a pytest session inside another


def _current_session() -> _Session:
    return _sessions[-1] if _sessions else _Session()


def pytest_addoption(parser):
    group = parser.getgroup("loadguard", "audit Hugging Face model loads (loadguard)")
    group.addoption("--loadguard", choices=POLICIES, default="off", help="audit every from_pretrained: off, warn, fail or repair (default: off)")
    group.addoption("--loadguard-poison", action="store_true", default=False, help="run model loads under loadguard.poison() (leftover memory becomes NaN)")
    group.addoption("--loadguard-record", default=None, metavar="PATH", help="write per-test outcomes and fingerprints as JSON")
    group.addoption(
        "--loadguard-workarounds-from", action="append", default=[], metavar="FILE", help="import a Python file that registers workarounds (repeatable)"
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "loadguard(policy=None, workarounds=(), strict_stale=False): per-test loadguard policy and workarounds",
    )
    session = _Session(
        policy=config.getoption("--loadguard"),
        poison=config.getoption("--loadguard-poison"),
        record_path=config.getoption("--loadguard-record"),
    )
    files = config.getoption("--loadguard-workarounds-from") or []
    if files:
        from . import workarounds as registry
        from .errors import LoadguardError

        for file in files:
            try:
                registry.load_file(file)
            except LoadguardError as error:
                raise pytest.UsageError(f"loadguard: {error.message}. {error.hint}") from None
    _sessions.append(session)
    from . import _observers

    session.undo.append(_observers.listen(functools.partial(_on_event, session)))
    _install_patch(session)


def pytest_unconfigure(config):
    if not _sessions:
        return
    session = _sessions.pop()
    while session.undo:
        session.undo.pop()()
    if session.record_path and not hasattr(config, "workerinput"):  # an xdist worker's record goes to the controller
        processes = dict(session.workers)
        if session.results or not processes:
            processes["main"] = session.results
        with open(session.record_path, "w") as handle:
            json.dump({"processes": processes}, handle, indent=2)


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)  # set on pytest-xdist workers only
    if workeroutput is not None:
        own = _current_session()
        workeroutput["loadguard"] = json.dumps({"loads": own.loads, "results": own.results})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist, on the controller: take over a finished worker's load summaries and record."""
    data = getattr(node, "workeroutput", {}).get("loadguard")
    if data is None:
        return
    data = json.loads(data)
    session = _current_session()
    session.loads.extend(data["loads"])
    session.workers[node.workerinput["workerid"]] = data["results"]


# ----------------------------------------------------------------------------------------------------
# per-test settings


def _marker(item) -> dict:
    marker = item.get_closest_marker("loadguard") if item is not None else None
    return dict(marker.kwargs) if marker is not None else {}


def _policy(item, session: _Session | None = None) -> str:
    policy = _marker(item).get("policy") or (session or _current_session()).policy
    if policy not in POLICIES:
        raise pytest.UsageError(f"loadguard marker: policy={policy!r} is not one of {POLICIES}")
    return policy


def _on_event(session: _Session, event: str, payload: dict) -> None:
    item = session.current
    if item is None:
        return
    record = session.records.setdefault(item.nodeid, _TestRecord())
    if event == "load":
        report, repaired = payload["report"], payload.get("repair")
        record.loads.append((report, repaired))
        record.reports.append(report)
        session.loads.append(
            {
                "model": report.model,
                "ok": report.ok,
                "tensors": [f.tensor for f in report.failures],
                "repaired": None if repaired is None else repaired.ok,
                "stale": [[w.name, w.detail] for w in report.workarounds if w.status == "stale"],
            }
        )
    elif event == "compare":
        record.comparisons.append(payload)


# ----------------------------------------------------------------------------------------------------
# the from_pretrained patch


_MODELING = "transformers.modeling_utils"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback on a module right after it is first imported, so the plugin patches transformers
    only in runs that import it (a pytest run that never touches transformers pays nothing)."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        execute, callback = spec.loader.exec_module, self.callback

        def exec_module(module):
            execute(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _install_patch(session: _Session) -> None:
    module = sys.modules.get(_MODELING)
    if module is not None:
        _patch_from_pretrained(session, module.PreTrainedModel)
        return
    hook = _AfterImport(_MODELING, lambda module: _patch_from_pretrained(session, module.PreTrainedModel))
    sys.meta_path.insert(0, hook)
    session.undo.append(hook.remove)


def _patch_from_pretrained(session: _Session, PreTrainedModel) -> None:
    original = PreTrainedModel.__dict__["from_pretrained"]
    function = original.__func__

    @functools.wraps(function)
    def from_pretrained(cls, *args, **kwargs):
        from . import _observers

        item = session.current
        if _observers.inside_load.get() or item is None:
            return function(cls, *args, **kwargs)  # loadguard.load audits itself; outside tests: untouched
        from . import workarounds as registry

        policy = _policy(item, session)
        selection = _marker(item).get("workarounds", ())
        path = args[0] if args else kwargs.get("pretrained_model_name_or_path")

        def attempt(active):
            from .poison import poison

            with poison() if session.poison or registry.decides_on_memory(selection) else contextlib.nullcontext():
                return function(cls, *args, **kwargs)

        try:
            model, early = registry.attempt(attempt, selection, path, _config_of(path), strict=bool(_marker(item).get("strict_stale", False)))
        except Exception as error:
            _name_workarounds(error, selection)
            raise
        registry.remember(model, early)
        if policy != "off" or session.poison:
            _audit_load(model, policy, item, early)
        return model

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)

    def undo():
        PreTrainedModel.from_pretrained = original

    session.undo.append(undo)


def _config_of(path) -> dict:
    """The config.json of a local model folder (for the workarounds' applies_to), else just its name."""
    from . import _hf

    return {"_name_or_path": str(path), **(_hf.local_config(path) or {})}


def _name_workarounds(error: BaseException, selection) -> None:
    """A load that failed the way registered workarounds fix: say which, and how to apply them here."""
    from . import workarounds as registry
    from .errors import LoadguardError, fixes_hint

    active = {w.name for w in registry.resolve(selection)}
    names = [n for n in registry.fixes_for(error) if n not in active]
    if not names:
        return
    if isinstance(error, LoadguardError):
        error.fixes = tuple(names)
    error.add_note(f"loadguard: {fixes_hint(names, 'pytest')}")


def _audit_load(model, policy: str, item, early=()) -> None:
    from . import _observers
    from . import workarounds as registry
    from .load import describe_failures
    from .repair import repair

    settings = _marker(item)
    chosen = [w for w in registry.resolve(settings.get("workarounds", ())) if w.stage == "after_load"]
    as_loaded, after = registry.audit_after_load(model, chosen, early=early, strict=bool(settings.get("strict_stale", False)))
    report = after or as_loaded
    model.loadguard_report = report
    result = None
    if not report.ok and policy == "repair":
        result = repair(model, report)
    _observers.notify("load", report=report, repair=result, policy=policy)
    if result is not None and not result.ok:  # never let a test compare against a model that is still broken
        from .load import UNREPAIRED_HINT, describe_unrepaired

        pytest.fail(f"loadguard: {describe_unrepaired(result)}\nHint: {UNREPAIRED_HINT}", pytrace=False)
    if report.ok or policy in ("off", "repair"):
        return
    message = describe_failures(report)
    hint = (
        "repair it (--loadguard=repair, or loadguard.load(..., on_problem='repair')), or fix the model's _init_weights "
        "so it rebuilds these tensors"
    )
    if policy == "warn":
        from .load import LoadguardWarning

        warnings.warn(LoadguardWarning(f"{message}. {hint}"), stacklevel=3)
        return
    pytest.fail(f"loadguard: {message}\nHint: {hint}", pytrace=False)


# ----------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture
def loadguard_report(request) -> list:
    """The audit reports of the models the current test loaded so far (a live list)."""
    return _current_session().records.setdefault(request.node.nodeid, _TestRecord()).reports


@pytest.fixture
def hf_runner(request):
    """The HfRunner class with this session's policy, poison and the test's workarounds applied."""
    from .runner import HfRunner

    settings = _marker(request.node)
    session = _current_session()

    def make(model, *args, **kwargs):
        kwargs.setdefault("audit", _RUNNER_POLICY[_policy(request.node, session)])
        kwargs.setdefault("poison", session.poison)
        kwargs.setdefault("workarounds", tuple(settings.get("workarounds", ())))
        kwargs.setdefault("strict_stale", bool(settings.get("strict_stale", False)))
        from .errors import BrokenModelError, LoadguardError, hint_for

        try:
            return HfRunner(model, *args, **kwargs)
        except BrokenModelError as error:  # one clear failure, not a traceback into loadguard
            failure = f"loadguard: {error}"
            if kwargs["audit"] != "repair":  # under repair, repair already ran and could not make it clean
                failure += "\nIn this pytest run: --loadguard=repair repairs every audited load"
        except LoadguardError as error:
            if not error.fixes:
                raise
            failure = f"loadguard: {error.message}\nHint: {hint_for(error, 'pytest')}"
        # failed outside the except block, so the report shows the message once, not as a chained exception
        pytest.fail(failure, pytrace=False)

    return make


# ----------------------------------------------------------------------------------------------------
# test lifecycle, fingerprints, summary


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    session = _current_session()
    session.current = item
    try:
        yield
    finally:
        session.current = None


def fingerprint(comparisons: list) -> tuple[str | None, list]:
    """Hash of the generated token ids and of the logprobs rounded to the comparison tolerance; also the
    first side's token ids per prompt (to locate where runs differ)."""
    if not comparisons:
        return None, []
    digest = hashlib.sha256()
    tokens = []
    for payload in comparisons:
        tolerance = payload.get("tolerance") or 0.01
        decimals = max(0, min(6, -int(f"{tolerance:e}".split("e")[1])))
        for side in ("outputs_0", "outputs_1"):
            for output in payload[side]:
                ids = [int(t) for t in output[0]]
                digest.update(json.dumps(ids).encode())
                if side == "outputs_0":
                    tokens.append(ids)
                if len(output) == 3:
                    steps = [{str(k): round(float(getattr(v, "logprob", v)), decimals) for k, v in sorted((step or {}).items())} for step in output[2]]
                    digest.update(json.dumps(steps).encode())
    return digest.hexdigest()[:16], tokens


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    session = _current_session()
    record = session.records.get(item.nodeid)
    if record is not None and record.loads and report.failed:
        lines = []
        for audit_report, repaired in record.loads:
            if audit_report.ok:
                lines.append(f"{audit_report.model}: loaded clean")
                continue
            for finding in audit_report.failures:
                lines.append(f"{audit_report.model}: {finding.tensor} {finding.status} ({finding.detail})")
            if repaired is not None:
                lines.append(f"  repaired: {', '.join(repaired.repaired)}; clean after repair: {repaired.ok}")
        report.sections.append(("loadguard: models loaded by this test", "\n".join(lines)))
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        comparisons = record.comparisons if record is not None else []
        digest, tokens = fingerprint(comparisons)
        message = ""
        if report.failed:
            message = str(getattr(call.excinfo, "value", "")).strip().splitlines()[0][:300] if call.excinfo else "failed"
        session.results[item.nodeid] = {
            "outcome": report.outcome,
            "fingerprint": digest or hashlib.sha256(f"{report.outcome}:{_PATH.sub('<path>', message)}".encode()).hexdigest()[:16],
            "from_outputs": digest is not None,
            "tokens": tokens,
            "message": message,
            "findings": [
                {"model": r.model, "tensor": f.tensor, "status": f.status} for r, _ in (record.loads if record else []) for f in r.failures
            ],
        }


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    session = _current_session()
    if session.policy == "off" and not session.poison:
        return
    loads = session.loads
    terminalreporter.section("loadguard")
    workers = f" in {len(session.workers)} xdist worker(s)" if session.workers else ""
    terminalreporter.write_line(f"policy {session.policy}, poison {'on' if session.poison else 'off'}: {len(loads)} model load(s) audited{workers}")
    by_model: dict[str, list] = {}
    for load in loads:
        by_model.setdefault(load["model"], []).append(load)
    for model, items in sorted(by_model.items()):
        broken = [load for load in items if not load["ok"]]
        tensors = sorted({tensor for load in broken for tensor in load["tensors"]})
        line = f"  {model}: {len(items)} load(s), {len(broken)} broken"
        if tensors:
            line += f" ({', '.join(tensors)})"
        repaired = sum(1 for load in items if load["repaired"])
        if repaired:
            line += f", {repaired} repaired"
        terminalreporter.write_line(line)
    stale = sorted({(name, detail) for load in loads for name, detail in load["stale"]})
    for name, detail in stale:
        terminalreporter.write_line(f"  stale workaround {name}: {detail}")
