"""Where loadguard keeps what it computes once per machine: matrix environments, self-check records, benchmark
checkpoints."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$LOADGUARD_CACHE``, else ``$XDG_CACHE_HOME/loadguard``, else ``~/.cache/loadguard``."""
    if os.environ.get("LOADGUARD_CACHE"):
        return Path(os.environ["LOADGUARD_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "loadguard"
