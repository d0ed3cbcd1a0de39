"""One fork pool for everything that runs many models in isolation: a child forked, for each item, from a process that
has already imported torch, transformers and loadguard.

The child runs one function on one item and exits, so a model's remote code is imported only there and never reaches
the next item, while an item costs its own work, not another import of torch and transformers (6-8 s). Results come
back pickled through a pipe. A child that runs past ``timeout``, or grows past ``memory_limit`` bytes beyond what it
shared with its parent at the fork, is killed, and one that dies (a segfault, ``os._exit``, the kernel's OOM killer) is
reported: each is an :class:`Outcome` with the reason, never a hung, swapping or aborted run. Used by scan fleets
(``loadguard scan A B C``, ``--native``) and by the matrix's per-environment worker (:mod:`loadguard._cells`).

Where ``os.fork`` is not available, :func:`available` says so and callers fall back to fresh interpreters.
"""

from __future__ import annotations

import gc
import os
import pickle
import selectors
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """What one child gave back: ``value`` when ``ok``, else ``error`` (an exception it raised, a timeout, a crash)."""

    ok: bool
    value: Any = None
    error: str = ""
    seconds: float = 0.0
    killed: str | None = None
    """``"timeout"`` or ``"memory"`` when the pool killed the child past that limit; None otherwise."""


def available() -> bool:
    return hasattr(os, "fork")


def _child(function: Callable[[Any], Any], item: Any, write: int) -> None:
    code = 0
    try:
        torch = sys.modules.get("torch")
        if torch is not None:  # the parent's OpenMP thread team does not survive a fork: one thread, no team to wait on
            torch.set_num_threads(1)
        try:
            payload = pickle.dumps((True, function(item)))
        except BaseException as error:  # the item's own failure: reported, never propagated into the parent
            payload = pickle.dumps((False, f"{type(error).__name__}: {error}"))
        view = memoryview(payload)
        while view:
            view = view[os.write(write, view) :]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_POLL = 0.05  # seconds between two looks at the children's memory


def resident(pid: int | str = "self") -> int | None:
    """Resident bytes of a process (Linux /proc); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def added(pid: int | str = "self") -> int | None:
    """Bytes a process holds that it does not share: its private dirty pages and its swap (Linux
    /proc/PID/smaps_rollup). For a forked child this is what it allocated or wrote since the fork, not what it
    inherited: its resident size would also miss the parent's shared-library pages that fork does not map into the
    child (hundreds of MB with a CUDA build of torch) and so misjudge any limit by that much. None where it cannot be
    read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            fields = dict(line.split(b":", 1) for line in rollup.read().splitlines() if b":" in line)
        return sum(int(fields[key].split()[0]) for key in (b"Private_Dirty", b"Swap") if key in fields) * 1024
    except (OSError, ValueError, IndexError):
        return None


def size_text(count: float) -> str:
    """Bytes as people read them: 512 B, 3.2 MiB, 1.5 GiB."""
    if count < 1024:
        return f"{int(count)} B"
    for unit in ("KiB", "MiB"):
        count /= 1024
        if count < 1024:
            return f"{count:.1f} {unit}"
    return f"{count / 1024:.1f} GiB"


def _describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"the process died ({name})"
    return f"the process exited with code {os.WEXITSTATUS(status)} before reporting"


class _Reported(dict):
    """The outcomes, each reported to ``on_done`` as it is recorded."""

    def __init__(self, on_done: Callable[[int, Outcome], None]):
        super().__init__()
        self.on_done = on_done

    def __setitem__(self, index: int, outcome: Outcome) -> None:
        super().__setitem__(index, outcome)
        self.on_done(index, outcome)


def run(
    function: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    jobs: int = 1,
    timeout: float | None = None,
    memory_limit: int | None = None,
    on_done: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    """``function(item)`` for every item, each in a child of its own, ``jobs`` at a time; outcomes in item order.
    ``memory_limit``: bytes a child may add to what it shares with its parent at the fork (:func:`added`: its private
    pages; where that cannot be read, its resident memory beyond the parent's). ``on_done(index, outcome)`` is called
    as each item finishes (a progress bar)."""
    pending = list(enumerate(items))
    outcomes: dict[int, Outcome] = _Reported(on_done) if on_done else {}
    running: dict[int, tuple[int, int, float, bytearray]] = {}  # read fd -> (index, pid, start, data)
    selector = selectors.DefaultSelector()
    private = added() is not None
    baseline = 0 if private else resident() if memory_limit else None
    watch_memory = bool(memory_limit) and baseline is not None
    grown_by = added if private else resident

    def kill(fd: int, limit: str, reason: str, now: float) -> None:
        index, pid, start, _ = running.pop(fd)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        selector.unregister(fd)
        os.close(fd)
        outcomes[index] = Outcome(False, error=reason, seconds=now - start, killed=limit)

    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                index, item = pending.pop(0)
                read, write = os.pipe()
                # what the child inherits is frozen out of its garbage collector: a collection there would otherwise
                # walk (and so copy, page by page) the whole inherited heap, every imported model module included
                gc.freeze()
                pid = os.fork()
                if pid == 0:  # the child
                    os.close(read)
                    _child(function, item, write)
                gc.unfreeze()
                os.close(write)
                running[read] = (index, pid, time.perf_counter(), bytearray())
                selector.register(read, selectors.EVENT_READ)
            deadline = min((start + timeout for _, _, start, _ in running.values()), default=None) if timeout else None
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            if watch_memory:
                wait = _POLL if wait is None else min(wait, _POLL)
            for key, _ in selector.select(wait):
                index, pid, start, data = running[key.fd]
                chunk = os.read(key.fd, 1 << 20)
                if chunk:
                    data.extend(chunk)
                    continue
                selector.unregister(key.fd)
                os.close(key.fd)
                del running[key.fd]
                _, status = os.waitpid(pid, 0)
                seconds = time.perf_counter() - start
                if data:
                    ok, value = pickle.loads(bytes(data))
                    outcomes[index] = Outcome(True, value, seconds=seconds) if ok else Outcome(False, error=value, seconds=seconds)
                else:
                    outcomes[index] = Outcome(False, error=_describe_exit(status), seconds=seconds)
            now = time.perf_counter()
            for fd, (index, pid, start, _) in list(running.items()):
                if timeout and now - start >= timeout:
                    kill(fd, "timeout", f"timed out after {timeout:g} s (killed)", now)
                elif watch_memory:
                    grown = (grown_by(pid) or 0) - baseline
                    if grown > memory_limit:
                        kill(fd, "memory", f"went over the memory limit: {size_text(grown)} beyond the process it was forked from, "
                                 f"limit {size_text(memory_limit)} (killed)", now)
    finally:
        for fd, (_, pid, _, _) in running.items():  # interrupted: leave no child behind
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            os.close(fd)
        selector.close()
    return [outcomes[index] for index in sorted(outcomes)]


__all__ = ["Outcome", "added", "available", "resident", "run", "size_text"]
