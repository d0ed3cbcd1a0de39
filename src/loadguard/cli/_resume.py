"""``--resume FILE``: results stream to FILE (JSON Lines) as they finish; a run given the same FILE again skips what it
holds. Shared by ``scan`` (a row per model) and ``matrix`` (a row per cell)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

from ..errors import InvalidOptionError
from ._common import note


def read(
    path: str,
    keys: Sequence[Hashable],
    key_of: Callable[[dict], Hashable | None],
    *,
    what: str,
    valid: Callable[[dict], bool] | None = None,
) -> dict:
    """The rows FILE holds for ``keys``, by key (``key_of`` a row's key, None for a line that is not a row; a line an
    interruption cut short is ignored); says how many are there and how many to go. A row ``valid`` refuses (a shape
    no run of this version writes: edited, or from another version) is never trusted: its key is done again, and the
    note says how many."""

    wanted, done, refused = set(keys), {}, set()
    try:
        with open(path, "rb") as stream:
            for raw in stream:
                try:  # a line that is not UTF-8, not JSON or nested past the reader's depth: not a row
                    row = json.loads(raw.decode("utf-8"))
                except (ValueError, RecursionError):
                    continue
                try:
                    key = key_of(row) if isinstance(row, dict) else None
                    if key is not None and key in wanted and valid is not None and not valid(row):
                        refused.add(key)
                        continue
                except Exception:  # a row no check foresaw: not trusted either
                    continue
                if key is not None and key in wanted:
                    done[key] = row
                    refused.discard(key)
    except FileNotFoundError:
        pass
    except OSError as error:
        raise InvalidOptionError(
            f"--resume {path}: {error.strerror}", "pass a file this run can read and append to"
        ) from None
    refused -= set(done)
    if refused:
        note(f"{path}: {len(refused)} row(s) of the wrong shape, not trusted: done again")
    if done:
        note(f"resuming from {path}: {len(done)} of {len(wanted)} {what} there, {len(wanted) - len(done)} to go")
    return done


@contextlib.contextmanager
def appending(path: str):
    """``write(row)``: one JSON line appended to FILE and flushed, so an interruption loses at most the line it cuts."""

    try:
        stream = open(path, "a", encoding="utf-8")
    except OSError as error:
        raise InvalidOptionError(f"--resume {path}: {error.strerror}", "pass a file this run can append to") from None
    with stream:
        if stream.tell() and not Path(path).read_bytes().endswith(b"\n"):
            stream.write("\n")  # after a line an interruption cut short: the next row starts a line of its own

        def write(row: dict) -> None:
            stream.write(json.dumps(row) + "\n")
            stream.flush()

        yield write


def resumed(
    path: str,
    keys: Sequence[Hashable],
    key_of: Callable[[dict], Hashable | None],
    run,
    *,
    what: str,
    valid: Callable[[dict], bool] | None = None,
) -> list[dict]:
    """:func:`read`, then ``run(todo, write)`` for the keys FILE lacks, which calls ``write(row)`` as each finishes and
    returns ``{key: row}``. Rows in the order of ``keys``."""
    done = read(path, keys, key_of, what=what, valid=valid)
    todo = [key for key in keys if key not in done]
    fresh: dict = {}
    if todo:
        with appending(path) as write:
            fresh = run(todo, write)
    return [done.get(key) or fresh[key] for key in keys]


__all__ = ["appending", "read", "resumed"]
