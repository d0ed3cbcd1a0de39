"""Per-test outcomes and fingerprints (what ``loadguard repeat`` compares across runs), the failure section naming
what each test's loads got wrong, and the terminal summary."""

from __future__ import annotations

import hashlib
import json

import pytest

from ._state import current_session


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    session = current_session()
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
                    steps = [
                        {
                            str(k): round(float(getattr(v, "logprob", v)), decimals)
                            for k, v in sorted((step or {}).items())
                        }
                        for step in output[2]
                    ]
                    digest.update(json.dumps(steps).encode())
    return digest.hexdigest()[:16], tokens


def failure_fingerprint(outcome: str, excinfo, findings: list[str]) -> str:
    """What identifies a failure across runs and machines: the outcome, the exception's type, where it was raised (file
    name and line) and the tensors the test's loads got wrong; never its message (addresses, timings, leftover values
    and temporary paths differ from run to run)."""
    where, kind = "", ""
    if excinfo is not None:
        kind = excinfo.type.__name__
        try:
            entry = excinfo.traceback[-1]
            where = f"{str(entry.path).rsplit('/', 1)[-1]}:{entry.lineno + 1}"  # the file's name: temp folders differ
        except (IndexError, AttributeError):
            where = ""
    return hashlib.sha256(json.dumps([outcome, kind, where, findings]).encode()).hexdigest()[:16]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    session = current_session()
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
            lines = str(getattr(call.excinfo, "value", "")).strip().splitlines() if call.excinfo else []
            # an exception with no message (StopIteration, a bare AssertionError) is named by its type
            message = lines[0][:300] if lines else (call.excinfo.typename if call.excinfo else "failed")
        findings = sorted(f"{f.tensor}:{f.status}" for r, _ in (record.loads if record else []) for f in r.failures)
        session.results[item.nodeid] = {
            "outcome": report.outcome,
            "fingerprint": digest
            or failure_fingerprint(report.outcome, call.excinfo if report.failed else None, findings),
            "from_outputs": digest is not None,
            "tokens": tokens,
            "message": message,
            "findings": [
                {"model": r.model, "tensor": f.tensor, "status": f.status}
                for r, _ in (record.loads if record else [])
                for f in r.failures
            ],
        }


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # the vocabulary waits for a load: a pytest run that never loads a model does not import it
    from ..report import Status, WorkaroundStatus

    session = current_session()
    if session.policy == "off" and not session.poison:
        return
    loads = session.loads
    terminalreporter.section("loadguard")
    workers = f" in {len(session.workers)} xdist worker(s)" if session.workers else ""
    terminalreporter.write_line(
        f"policy {session.policy}, poison {'on' if session.poisons(session.policy) else 'off'}: {len(loads)} model load(s) audited{workers}"
    )
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
        initialized = sum(load.get(Status.INITIALIZED, 0) for load in items)
        if initialized:
            line += f", {initialized} tensor(s) initialized on request (missing or resized, as transformers reports)"
        not_run = sorted({check for load in items for check in load.get("not_run", ())})
        if not_run:
            line += f"; not run: {', '.join(not_run)} ({items[0].get('not_run_reason', '')})"
        terminalreporter.write_line(line)
    stale = sorted({(name, detail) for load in loads for name, detail in load[WorkaroundStatus.STALE]})
    for name, detail in stale:
        terminalreporter.write_line(f"  stale workaround {name}: {detail}")


__all__ = [
    "failure_fingerprint",
    "fingerprint",
    "pytest_runtest_makereport",
    "pytest_runtest_protocol",
    "pytest_terminal_summary",
]
