"""Counts the suite's loads for whoever runs it (``LOADGUARD_PEER_COUNT=FILE``)."""

from __future__ import annotations

import os


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("LOADGUARD_PEER_COUNT")
    if target:
        from test_loading_patterns import LOADS

        with open(target, "w") as handle:
            handle.write(str(LOADS["count"]))
