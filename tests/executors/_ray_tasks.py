"""Functions the Ray tests run as executor items: importable by the cluster's workers (the tests put the repository
on their PYTHONPATH), free of pytest."""

from __future__ import annotations

import os
import signal
import time


def behave(what: str):
    if what == "sleep":
        time.sleep(60)
    if what == "grow":
        hog = bytearray(600 << 20)  # touched, so it is really resident
        for at in range(0, len(hog), 4096):
            hog[at] = 1
        time.sleep(30)
    return f"done: {what}"


def kill_worker_once(marker: str):
    """The first run kills the Ray worker that forked it (as an OOM killer or a lost node would); the retry survives."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)
    return "survived"


def kill_worker_always(_):
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)
