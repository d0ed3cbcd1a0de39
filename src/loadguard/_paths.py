"""Paths loadguard creates, writes or deletes from something a user passed (a version string, a cache entry, an
output folder): each is resolved and must lie inside its root, or loadguard refuses with one line. Every delete and
every record goes through here."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .errors import InvalidOptionError


def inside(root: Path, path: Path, what: str, root_itself: bool = False) -> Path:
    """``path`` resolved, when it lies inside ``root`` (resolved too; ``root_itself``: or is it);
    :class:`InvalidOptionError` otherwise."""
    root_resolved, resolved = Path(root).resolve(), Path(path).resolve()
    if not (root_itself and resolved == root_resolved) and root_resolved not in resolved.parents:
        raise InvalidOptionError(f"{what} resolves to {resolved}, outside {root_resolved}: refused", "pass a plain name or version")
    return resolved


def remove_tree(root: Path, path: Path, what: str) -> None:
    """Delete the folder ``path`` (and everything below it), which must lie inside ``root``; a link is unlinked, never
    followed."""
    path = Path(path)
    if path.is_symlink():
        inside(root, path.parent, what, root_itself=True)
        path.unlink()
        return
    resolved = inside(root, path, what)
    if resolved.exists():
        shutil.rmtree(resolved)


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text``, all or nothing: written to a unique temporary file beside it, then renamed over it (two
    processes writing the same record never see each other's half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["inside", "remove_tree", "write_atomically"]
