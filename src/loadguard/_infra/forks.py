"""One fork pool for everything that runs many models in isolation: a child forked, for each item, from a process that
has already imported torch, transformers and loadguard.

The child runs one function on one item and exits, so a model's remote code is imported only there and never reaches
the next item, while an item costs its own work, not another import of torch and transformers (6-8 s). Results come
back pickled through a pipe. A child that runs past ``timeout``, or grows past ``memory_limit`` bytes beyond what it
shared with its parent at the fork, is killed, and one that dies (a segfault, ``os._exit``, the kernel's OOM killer) is
reported: each is an :class:`Outcome` with the reason, never a hung, swapping or aborted run. Used by scan fleets
(``loadguard scan A B C``, ``--native``) and by the matrix's per-environment worker (:mod:`loadguard.cli._cells`).

Where ``os.fork`` is not available, :func:`available` says so and callers fall back to fresh interpreters.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import selectors
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from . import procs


@dataclass(frozen=True)
class Outcome:
    """What one child gave back: ``value`` when ``ok``, else ``error`` (an exception it raised, a timeout, a crash)."""

    ok: bool
    value: Any = None
    error: str = ""
    seconds: float = 0.0
    killed: str | None = None
    """``"timeout"`` or ``"memory"`` when the pool killed the child past that limit; None otherwise."""
    left_behind: int = 0
    """Processes the item's code started and left running when it finished, which the pool then killed."""


def available() -> bool:
    return hasattr(os, "fork")


def _child(
    function: Callable[[Any], Any], item: Any, write: int, lifeline: tuple[int, int], keep_threads: bool
) -> None:
    """The forked child: dies with its parent, leads its own process group, adopts what the model's code orphans;
    runs ``function(item)``, kills every process the model's code left behind (their number goes in the report), then
    writes the length-prefixed pickled result and exits."""

    code = 0
    me = os.getpid()
    try:
        os.close(lifeline[1])
        procs.watch_lifeline(lifeline[0])
        procs.lead_group()
        procs.adopt_orphans()
        procs.reset_signals()
        torch = sys.modules.get("torch")
        if torch is not None and not keep_threads:
            torch.set_num_threads(1)  # the parent's OpenMP thread team does not survive a fork: no team to wait on
        try:
            result = (True, function(item))
        except BaseException as error:  # the item's own failure: reported, never propagated into the parent
            result = (False, f"{type(error).__name__}: {error}")
        if os.getpid() != me:  # a process the model's code forked, come back through here: it reports nothing
            os._exit(0)
        left = procs.sweep()
        try:
            payload = pickle.dumps((*result, left))
        except BaseException as error:  # a value that does not pickle: its own failure
            payload = pickle.dumps((False, f"{type(error).__name__}: {error}", left))
        view = memoryview(len(payload).to_bytes(8, "little") + payload)
        while view:
            view = view[os.write(write, view) :]
    except BaseException:
        code = 70
    finally:
        os._exit(code if os.getpid() == me else 0)


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
    return _kilobytes(f"/proc/{pid}/smaps_rollup", (b"Private_Dirty", b"Swap"))


def _kilobytes(path: str, keys: tuple[bytes, ...]) -> int | None:
    """The sum, in bytes, of the ``key: N kB`` lines of a /proc file; None where it cannot be read."""
    try:
        with open(path, "rb") as listing:
            fields = dict(line.split(b":", 1) for line in listing.read().splitlines() if b":" in line)
        return sum(int(fields[key].split()[0]) for key in keys if key in fields) * 1024
    except (OSError, ValueError, IndexError):
        return None


def held_at_most(pid: int | str = "self") -> int | None:
    """An upper bound of :func:`added`, cheap to read: resident plus swapped-out bytes (``VmRSS + VmSwap`` from
    /proc/PID/status, ~0.02 ms against ~5 ms for smaps_rollup, which walks every mapping: read every 50 ms for each
    running child it took a fifth of a core from the fleet). Private dirty pages are resident or swapped, so
    ``added <= held_at_most`` always; None where it cannot be read."""
    return _kilobytes(f"/proc/{pid}/status", (b"VmRSS", b"VmSwap"))


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...), from /proc's ``children`` lists; empty where they
    cannot be read."""
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as listing:
                    children = [int(c) for c in listing.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            pending += children
    return found


def _summed(read: Callable[[int], int | None], pids: list[int]) -> int | None:
    values = [read(p) for p in pids]
    return None if values[0] is None else sum(v for v in values if v is not None)


def _added_past(limit: int) -> Callable[[int], int | None]:
    """:func:`added` for a child and every process below it (a fresh interpreter it started, proof (b) of ``fix`` under
    transformers 4, counts against the same limit), read only when the cheap bound (:func:`held_at_most`) says they may
    be over ``limit`` (below it, the bound itself is returned: over nothing)."""

    def grown(pid: int) -> int | None:
        tree = [pid, *descendants(pid)]
        bound = _summed(held_at_most, tree)
        if bound is not None and bound <= limit:
            return bound
        return _summed(added, tree)

    return grown


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


@dataclass
class _Running:
    """A child the pool waits on: its item, its pid, when it started, what it has written so far, and its exit status
    once reaped."""

    index: int
    pid: int
    start: float
    data: bytearray = field(default_factory=bytearray)
    status: int | None = None

    def payload(self) -> bytes | None:
        """The pickled result, once all of it arrived (8 bytes of length, then the pickle); None before."""
        if len(self.data) < 8:
            return None
        size = int.from_bytes(self.data[:8], "little")
        return bytes(self.data[8 : 8 + size]) if len(self.data) >= 8 + size else None

    def reaped(self) -> bool:
        """Whether the child has exited (reaped now if so)."""
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.status = status
        return self.status is not None


def _wait(child: _Running) -> int:
    if child.status is None:
        try:
            child.status = os.waitpid(child.pid, 0)[1]
        except ChildProcessError:
            child.status = 0
    return child.status


def _drain(fd: int, child: _Running) -> None:
    """What is left in a pipe whose writer exited (a descendant may still hold it: no waiting for its end)."""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            return
        child.data.extend(chunk)


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
    keep_threads: bool = False,
) -> list[Outcome]:
    """``function(item)`` for every item, each in a child of its own, ``jobs`` at a time; outcomes in item order.
    ``memory_limit``: bytes a child may add to what it shares with its parent at the fork (:func:`added`: its private
    pages; where that cannot be read, its resident memory beyond the parent's). ``on_done(index, outcome)`` is called
    as each item finishes (a progress bar). ``keep_threads``: the children keep torch's thread count, which is safe
    only where this process has run no parallel torch op (an OpenMP team it started would hang a child's first op);
    otherwise each runs one thread."""

    pending = list(enumerate(items))
    outcomes: dict[int, Outcome] = _Reported(on_done) if on_done else {}
    running: dict[int, _Running] = {}  # read fd -> the child reading from it
    selector = selectors.DefaultSelector()
    private = added() is not None
    baseline = 0 if private else resident() if memory_limit else None
    watch_memory = bool(memory_limit) and baseline is not None
    grown_by = (
        _added_past(memory_limit)
        if private and memory_limit
        else lambda pid: _summed(resident, [pid, *descendants(pid)])
    )
    lifeline = os.pipe()  # the children see EOF on it when this process is gone, however it ended
    os.set_inheritable(lifeline[0], False)
    os.set_inheritable(lifeline[1], False)

    def close(fd: int) -> _Running:
        child = running.pop(fd)
        selector.unregister(fd)
        os.close(fd)
        return child

    def kill(fd: int, limit: str, reason: str, now: float) -> None:
        child = close(fd)
        procs.kill_tree(child.pid)
        _wait(child)
        outcomes[child.index] = Outcome(False, error=reason, seconds=now - child.start, killed=limit)

    def finish(fd: int) -> None:
        """The child reported (or closed its end, or exited): its outcome; whatever is left of its group is killed."""
        child = close(fd)
        status = _wait(child)
        seconds = time.perf_counter() - child.start
        stray = procs.group_alive(child.pid)  # left behind in its group (where the child could not sweep)
        procs.kill_group(child.pid)
        payload = child.payload()
        if payload is None:
            outcomes[child.index] = Outcome(
                False, error=_describe_exit(status), seconds=seconds, left_behind=int(stray)
            )
            return
        ok, value, left = pickle.loads(payload)
        left = max(left, int(stray))
        outcomes[child.index] = (
            Outcome(True, value, seconds=seconds, left_behind=left)
            if ok
            else Outcome(False, error=value, seconds=seconds, left_behind=left)
        )

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
                    _child(function, item, write, lifeline, keep_threads)
                gc.unfreeze()
                os.close(write)
                with contextlib.suppress(OSError):  # the group is made on both sides: no kill can miss it
                    os.setpgid(pid, pid)
                os.set_blocking(read, False)
                running[read] = _Running(index, pid, time.perf_counter())
                selector.register(read, selectors.EVENT_READ)
            deadline = min((child.start + timeout for child in running.values()), default=None) if timeout else None
            wait = _POLL if deadline is None else min(_POLL, max(0.0, deadline - time.perf_counter()))
            for key, _ in selector.select(wait):
                child = running[key.fd]
                try:
                    chunk = os.read(key.fd, 1 << 20)
                except BlockingIOError:
                    continue
                child.data.extend(chunk)
                if not chunk or child.payload() is not None:
                    finish(key.fd)
            for fd, child in list(running.items()):  # a child that exited while what it forked holds the pipe open
                if child.reaped():
                    _drain(fd, child)
                    finish(fd)
            now = time.perf_counter()
            for fd, child in list(running.items()):
                if timeout and now - child.start >= timeout:
                    kill(fd, "timeout", f"timed out after {timeout:g} s (killed)", now)
                elif watch_memory:
                    grown = (grown_by(child.pid) or 0) - baseline
                    if grown > memory_limit:
                        kill(
                            fd,
                            "memory",
                            f"went over the memory limit: {size_text(grown)} beyond the process it was forked from, "
                            f"limit {size_text(memory_limit)} (killed)",
                            now,
                        )
    finally:
        for fd, child in list(running.items()):  # interrupted: leave no child, and nothing a child started, behind
            procs.kill_tree(child.pid)
            with contextlib.suppress(OSError):
                _wait(child)
            os.close(fd)
        selector.close()
        os.close(lifeline[0])
        os.close(lifeline[1])
    return [outcomes[index] for index in sorted(outcomes)]


__all__ = ["Outcome", "added", "available", "held_at_most", "resident", "run", "size_text"]
