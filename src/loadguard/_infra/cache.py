"""Where loadguard keeps what it computes once per machine: matrix environments, self-check records, benchmark
checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import LoadguardError


def cache_root() -> Path:
    """``$LOADGUARD_CACHE``, else ``$XDG_CACHE_HOME/loadguard``, else ``~/.cache/loadguard``; resolved (a home cache
    that is a link, common on clusters, is where the link leads: every path below it is compared in that form)."""
    if os.environ.get("LOADGUARD_CACHE"):
        return Path(os.environ["LOADGUARD_CACHE"]).expanduser().resolve()
    return (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "loadguard").resolve()


def cache_folder(*parts: str) -> Path:
    """The cache folder ``parts`` (created): one line saying what is wrong when it cannot be (the cache root is a
    file, or not writable)."""

    path = cache_root().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".loadguard-write-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise LoadguardError(
            f"loadguard's cache {path} is not a writable folder ({error.strerror or error})",
            "set LOADGUARD_CACHE to a writable folder (default: ~/.cache/loadguard)",
        ) from None
    return path
