"""Paths loadguard creates, writes or deletes from something a user passed (a version string, a cache entry, an
output folder): each is resolved and must lie inside its root, or loadguard refuses with one line. Every delete and
every record goes through here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import InvalidOptionError


def inside(root: Path, path: Path, what: str, root_itself: bool = False) -> Path:
    """``path`` resolved, when it lies inside ``root`` (resolved too; ``root_itself``: or is it);
    :class:`InvalidOptionError` otherwise."""
    root_resolved, resolved = Path(root).resolve(), Path(path).resolve()
    if not (root_itself and resolved == root_resolved) and root_resolved not in resolved.parents:
        raise InvalidOptionError(
            f"{what} resolves to {resolved}, outside {root_resolved}: refused", "pass a plain name or version"
        )
    return resolved


def roots(folder: Path) -> tuple[Path, ...]:
    """Where a link in a model's folder may lead and stay the model's: the folder itself, and for a Hub snapshot in the
    Hugging Face cache (``.../snapshots/<commit>``) its repository's ``blobs``."""
    resolved = Path(folder).resolve()
    return (resolved, resolved.parent.parent / "blobs") if resolved.parent.name == "snapshots" else (resolved,)


def leaving(folder: Path, path: Path) -> Path | None:
    """Where ``path`` (a file of the model's ``folder``, or a folder below it) really is, when it is a link that leads
    out of the model's folder (a Hub snapshot's blobs stay in it); None for a plain file or a link that stays."""
    path = Path(path)
    if not any(
        part.is_symlink() for part in (path, *path.parents) if part == Path(folder) or Path(folder) in part.parents
    ):
        return None
    target = path.resolve()
    return None if any(root == target or root in target.parents for root in roots(folder)) else target


def named(path: Path, folder: Path | None = None) -> str:
    """A file as an error names it: its path, and where it leads when it is a link out of its model's folder."""
    target = leaving(Path(folder) if folder is not None else Path(path).parent, path)
    return f"{path} (a link to {target}, outside the model's folder)" if target is not None else str(path)


def unreadable_because(error: Exception) -> str:
    """Why a file could not be read, from where it failed and never from what it holds (the file may be a link to
    anything: its bytes are not shown)."""

    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON: line {error.lineno} column {error.colno}"
    return str(error)  # loadguard's own words


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


def fingerprint(folder: str | os.PathLike) -> str | None:
    """What a model folder's files are, in one SHA-256: every file's relative path, size and modification time (no
    content read: a 15 GB checkpoint costs one ``stat``). None when ``folder`` is not a local folder (a Hub id)."""
    try:
        if not os.path.isdir(folder):
            return None
        digest = hashlib.sha256()
        for root, folders, files in sorted(os.walk(folder)):
            folders.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                info = os.stat(path)
                digest.update(f"{os.path.relpath(path, folder)}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
        return digest.hexdigest()
    except (OSError, ValueError):
        return None


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
