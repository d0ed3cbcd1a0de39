"""pytest-xdist: every worker audits its own loads and hands its load summaries and record to the controller, so the
terminal summary and ``--loadguard-record`` cover every worker."""

from __future__ import annotations

import json

import pytest

from ._state import current_session


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)  # set on pytest-xdist workers only
    if workeroutput is not None:
        own = current_session()
        workeroutput["loadguard"] = json.dumps({"loads": own.loads, "results": own.results})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist, on the controller: take over a finished worker's load summaries and record."""
    data = getattr(node, "workeroutput", {}).get("loadguard")
    if data is None:
        return
    data = json.loads(data)
    session = current_session()
    session.loads.extend(data["loads"])
    session.workers[node.workerinput["workerid"]] = data["results"]


__all__ = ["pytest_sessionfinish", "pytest_testnodedown"]
