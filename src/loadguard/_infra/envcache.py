"""The environments of other transformers releases as the cache holds them (:mod:`loadguard._infra.envs` builds them):
listed with their size and last use, removed one by one (never one another process holds), and kept under the
cache's size cap, least recently used first; what ``loadguard cache`` shows and removes."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import LoadguardError
from . import settings
from .cache import cache_root
from .paths import remove_tree
from .sizes import parse_size

STAMP = ".loadguard-env.json"


USED = ".loadguard-last-used"


def read_stamp(stamp: Path) -> dict:
    try:
        return json.loads(stamp.read_text())
    except (OSError, ValueError):
        return {}


def touch(folder: Path) -> None:
    """When an environment was last used (what the cache's least-recently-used eviction goes by)."""
    try:
        (folder / USED).write_text(str(time.time()))
    except OSError:
        pass


@dataclass(frozen=True)
class Cached:
    """One environment in the cache: what ``loadguard cache list`` shows."""

    transformers: str
    folder: Path
    size: int
    last_used: float
    ok: bool

    def to_dict(self) -> dict:
        return {
            "transformers": self.transformers,
            "folder": str(self.folder),
            "bytes": self.size,
            "last_used": self.last_used or None,
            "ok": self.ok,
        }


def _size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):  # links (the shared torch) are counted as links, never followed
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def cached() -> list[Cached]:
    """Every environment in the cache, least recently used first."""
    root = cache_root() / "envs"
    found = []
    for folder in sorted(root.glob("*/transformers-*")) if root.is_dir() else []:
        if not folder.is_dir() or folder.name.startswith("."):
            continue
        recorded = read_stamp(folder / STAMP)
        try:
            used = float((folder / USED).read_text())
        except (OSError, ValueError):
            used = folder.stat().st_mtime
        version = folder.name.removeprefix("transformers-").rpartition("-")[0]
        found.append(Cached(version, folder, _size(folder), used, bool(recorded.get("ok"))))
    return sorted(found, key=lambda c: c.last_used)


def remove(entry: Cached) -> bool:
    """Remove one cached environment (and its lock and records), unless another process holds it now: then False."""
    lock = FileLock(str(entry.folder) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    try:
        remove_tree(cache_root() / "envs", entry.folder, "a cached environment")
        with contextlib.suppress(OSError):
            Path(f"{entry.folder}.override.txt").unlink()
    finally:
        lock.release()
    with contextlib.suppress(OSError):
        Path(f"{entry.folder}.lock").unlink()
    return True


def limit() -> int | None:
    """The cache's size cap in bytes: ``$LOADGUARD_CACHE_LIMIT``, else ``[tool.loadguard] cache-limit``; None: none."""
    text = os.environ.get("LOADGUARD_CACHE_LIMIT")
    if not text:
        try:
            text = settings.load().get("cache-limit")
        except LoadguardError:
            text = None
    if not text or str(text).strip().lower() in ("none", "0"):
        return None
    return parse_size(str(text))


def keep_under_limit(keep: Path | None = None) -> list[Cached]:
    """Least recently used environments removed until the cache holds at most :func:`limit` bytes (``keep``, the one
    just used, and any another process holds, stay); those removed."""
    cap = limit()
    if cap is None:
        return []
    entries = cached()
    total = sum(e.size for e in entries)
    removed = []
    for entry in entries:
        if total <= cap:
            break
        if keep is not None and entry.folder == Path(keep).resolve():
            continue
        if remove(entry):
            total -= entry.size
            removed.append(entry)
    return removed


__all__ = ["STAMP", "USED", "Cached", "cached", "keep_under_limit", "limit", "read_stamp", "remove", "touch"]
