"""Containment of the processes a run starts: none outlives it, whatever ends it.

- A subprocess (the 4.57 prover, a matrix environment's worker, a pytest run) calls :func:`die_with_parent` first
  (:func:`subprocess_options`): the kernel kills it when the process that started it dies (``PR_SET_PDEATHSIG``), even
  by ``SIGKILL``, so nothing is left running a model's code with no limit watching it.
- A forked child watches a lifeline (:func:`watch_lifeline`): a pipe whose only write end its parent holds; when the
  parent dies, however, the child kills everything it started and ends.
- A forked child leads a process group of its own (:func:`lead_group`); past a limit or on an interruption the parent
  kills it with everything below it (:func:`kill_tree`).
- A forked child is the subreaper of its descendants (:func:`adopt_orphans`): a process the model's code started and
  left behind, even one that ran ``setsid`` or double-forked, is found by :func:`sweep` and killed before the child
  reports; the report says how many there were.
- :func:`exits_refused` turns the model's ``os._exit`` / ``sys.exit`` during a load in loadguard's own process into an
  error (exit 2), never a silent exit 0.
- :func:`signals_raise` turns ``SIGTERM`` and ``SIGHUP`` into :class:`Terminated` in the main process, so every
  ``finally`` that stops a child runs (Python's default for those signals is to die on the spot).

Linux has all of it; elsewhere the process-group kill and the signal handling remain and the rest does nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from ..errors import ModelCodeExitedError

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if sys.platform != "linux":
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int | None = None) -> None:
    """In a child, first thing: killed (``SIGKILL``) when its parent dies. ``parent``: the pid that started it; if that
    one is already gone (it died between the fork and this call), the child exits at once."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if parent is not None and os.getppid() != parent:
        os._exit(75)


def lead_group() -> None:
    """In a forked child: a process group of its own, so the parent's ``killpg`` reaches everything it starts (and a
    terminal's Ctrl-C reaches only the parent, which then stops the children itself)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def adopt_orphans() -> bool:
    """In a forked child: descendants whose parent dies are re-parented here, not to PID 1 (``PR_SET_CHILD_SUBREAPER``),
    so :func:`sweep` finds every one of them."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def children(pid: int | str = "self") -> list[int]:
    """The direct children of a process (Linux ``/proc/PID/task/*/children``); [] where that cannot be read."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as listing:
                found.extend(int(word) for word in listing.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int | str = "self") -> list[int]:
    """Every process below ``pid`` (children, theirs, ...)."""
    out: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children(child))
    return out


def sweep(rounds: int = 20, spare: frozenset[int] | set[int] = frozenset()) -> int:
    """Kill (``SIGKILL``) every descendant of this process but those in ``spare`` and reap them; the number there were.
    Repeated until none is left, for one forking while the sweep runs."""
    seen: set[int] = set()
    for _ in range(rounds):
        found = [pid for pid in descendants() if pid != os.getpid() and pid not in spare]
        if not found:
            break
        for pid in found:
            seen.add(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap(time.monotonic() + 1.0)
    return len(seen)


def _reap(until: float) -> None:
    while time.monotonic() < until:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if not descendants():
                return
            time.sleep(0.005)


def kill_group(pid: int) -> None:
    """``SIGKILL`` to a child's process group (the child and what it started), then to the child itself (in case it
    had not made its group yet)."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def kill_tree(pid: int) -> None:
    """Kill a child and everything below it, even a descendant that left its process group (``setsid``): the group is
    stopped first (no new forks), then every descendant found under the child (a subreaper: the orphans are there too)
    is killed, then the group and the child."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGSTOP)
    for _ in range(3):
        found = descendants(pid)
        if not found:
            break
        for below in found:
            with contextlib.suppress(OSError):
                os.kill(below, signal.SIGKILL)
    kill_group(pid)


def watch_lifeline(read: int) -> None:
    """In a forked child: a thread that waits for EOF on ``read`` (the parent holds the only write end, so EOF means
    the parent is gone), then kills every descendant of the child and ends it. The descendants the model's code started
    do not outlive the parent either (``PR_SET_PDEATHSIG`` would end the child alone, leaving them to PID 1)."""

    def watch() -> None:
        try:
            while os.read(read, 1):
                pass
        except OSError:
            pass
        sweep(rounds=5)
        os._exit(75)

    threading.Thread(target=watch, name="loadguard-lifeline", daemon=True).start()


def group_alive(pid: int) -> bool:
    """Whether a process of ``pid``'s process group still runs (its leader reaped, what it started not)."""
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@contextlib.contextmanager
def exits_refused(what: str):
    """While the model's code runs in this process (``what``: "loading ./m"): its ``os._exit`` or ``sys.exit`` raises
    :class:`loadguard.errors.ModelCodeExitedError` instead of ending the run with a status that reads as success (no
    report, exit 0). A process the model's code forked exits as it asks. On the way out ``os._exit``, the working
    folder and the dispositions of SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD and SIGQUIT are loadguard's again (a
    ``SIG_IGN`` the code set does not outlive its load)."""
    owner, real = os.getpid(), os._exit

    def refused(status: int) -> None:
        if os.getpid() != owner:  # a child of the model's own: its exit is its business
            real(status)
        raise ModelCodeExitedError(f"the model's code called os._exit({status}) while {what}: nothing was checked")

    os._exit = refused
    where = _cwd()
    dispositions = {number: signal.getsignal(number) for number in _KEPT}
    try:
        yield
    except SystemExit as error:
        if os.getpid() != owner:
            raise
        raise ModelCodeExitedError(
            f"the model's code called sys.exit({error.code!r}) while {what}: nothing was checked"
        ) from None
    finally:
        os._exit = real
        if os.getpid() == owner:  # what the model's code changed of the process: loadguard's again
            for number, handler in dispositions.items():
                if handler is not None and signal.getsignal(number) is not handler:
                    with contextlib.suppress(ValueError, OSError, TypeError):
                        signal.signal(number, handler)
            if where is not None and _cwd() != where:
                with contextlib.suppress(OSError):
                    os.chdir(where)


_KEPT = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGCHLD", "SIGQUIT")
    if hasattr(signal, name)
)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


def subprocess_options() -> dict:
    """Keyword arguments for ``subprocess.Popen``/``run`` of a process that runs model code or builds environments: it
    dies with this process (``preexec_fn`` sets ``PR_SET_PDEATHSIG``)."""
    if sys.platform != "linux":
        return {}
    parent = os.getpid()
    return {"preexec_fn": lambda: die_with_parent(parent)}


class Terminated(BaseException):
    """``SIGTERM`` or ``SIGHUP`` arrived: raised in the main thread so cleanup runs; the CLI then ends by that signal."""

    def __init__(self, number: int):
        super().__init__(number)
        self.number = number

    @property
    def name(self) -> str:
        return signal.Signals(self.number).name


@contextlib.contextmanager
def signals_raise():
    """``SIGTERM``/``SIGHUP`` raise :class:`Terminated` in the block (the main thread only; elsewhere a no-op); the
    handlers before it are restored after."""

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(number, frame):
        raise Terminated(number)

    wanted = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {number: signal.signal(number, handler) for number in wanted}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def reset_signals() -> None:
    """In a forked child: the default action for the signals the parent handles (the child dies of them, it does not
    raise the parent's exception in the model's code)."""
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        if hasattr(signal, name):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(getattr(signal, name), signal.SIG_DFL)


__all__ = [
    "Terminated",
    "adopt_orphans",
    "children",
    "descendants",
    "die_with_parent",
    "group_alive",
    "kill_group",
    "kill_tree",
    "lead_group",
    "reset_signals",
    "signals_raise",
    "subprocess_options",
    "sweep",
    "watch_lifeline",
]
