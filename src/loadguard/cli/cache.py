"""``loadguard cache``: the environments of other transformers releases that ``fix``'s proofs and ``matrix`` cells run
in (one per release, 150-300 MB each, torch shared with this environment), listed and removed, as ``hf cache`` and
``pip cache`` list and remove theirs."""

from __future__ import annotations

import json
import time

import click

from ._common import ExitCode, emit, note
from ._options import SuggestingGroup, format_option


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


def _age(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:.0f} day(s) ago" if days >= 1 else f"{seconds / 3600:.0f} hour(s) ago"


@click.group(cls=SuggestingGroup)
def cache():
    """loadguard's cache of transformers environments (proof (b) of fix, matrix cells): list, remove."""


@cache.command("list", short_help="List the cached environments.")
@format_option("json")
def list_cache(fmt):
    """Every cached environment: its transformers release, size, when it was last used and where it is."""
    from .._infra import cache_root, envcache

    entries = envcache.cached()
    total = sum(e.size for e in entries)
    cap = envcache.limit()
    if fmt == "json":
        emit(
            json.dumps(
                {
                    "root": str(cache_root()),
                    "bytes": total,
                    "limit": cap,
                    "environments": [e.to_dict() for e in entries],
                },
                indent=2,
            )
        )
        return ExitCode.CLEAN
    from rich.table import Table

    from ._consoles import stdout

    now = time.time()
    table = Table("transformers", "size", "last used", "folder")
    for entry in entries:
        table.add_row(
            entry.transformers + ("" if entry.ok else " (broken)"),
            _size(entry.size),
            _age(now - entry.last_used),
            str(entry.folder),
        )
    stdout().print(table)
    note(
        f"{len(entries)} environment(s), {_size(total)} in {cache_root()}"
        + (f"; cache-limit {_size(cap)}" if cap else "; no cache-limit set ([tool.loadguard] cache-limit)")
    )
    return ExitCode.CLEAN


@cache.command("remove", short_help="Remove cached environments.")
@click.argument("versions", nargs=-1, metavar="[VERSION]...")
@click.option("--older-than", type=click.FloatRange(0, None), default=None, metavar="DAYS", help="Unused for DAYS.")
@click.option("--all", "everything", is_flag=True, help="Every cached environment.")
@format_option("json")
def remove_cache(versions, older_than, everything, fmt):
    """Remove cached environments: those of the transformers VERSIONs named, those unused for --older-than DAYS, or
    --all. One another loadguard process is using is left in place, and said."""
    from .._infra import envcache, envs
    from ..errors import InvalidOptionError

    if not versions and older_than is None and not everything:
        raise InvalidOptionError(
            "loadguard cache remove needs what to remove", "name versions (5.24.0), --older-than DAYS, or --all"
        )
    wanted = {envs.release(v) for v in versions}
    now = time.time()
    chosen = [
        e
        for e in envcache.cached()
        if everything
        or e.transformers in wanted
        or (older_than is not None and now - e.last_used >= older_than * 86400)
    ]
    removed, busy = [], []
    for entry in chosen:
        (removed if envcache.remove(entry) else busy).append(entry)
    if fmt == "json":
        emit(json.dumps({"removed": [e.to_dict() for e in removed], "in_use": [e.to_dict() for e in busy]}, indent=2))
    else:
        for entry in removed:
            emit(f"removed transformers {entry.transformers} ({_size(entry.size)}): {entry.folder}")
        for entry in busy:
            note(f"left transformers {entry.transformers}: another loadguard process is using it ({entry.folder})")
        if not chosen:
            note("nothing matched: `loadguard cache list` shows what is cached")
    return ExitCode.CLEAN


__all__ = ["cache"]
