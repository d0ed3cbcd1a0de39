"""Where fleet-shaped work runs: an :class:`Executor` maps a function over items, each in a process of its own under
the same per-item limits (``timeout``, ``memory_limit``), and gives back one :class:`~loadguard._infra.forks.Outcome` per item
in item order. ``local`` forks children on this machine (:mod:`loadguard._infra.forks`); ``ray`` runs each item as a task on a
Ray cluster, where the task forks the same child on its node. Commands (``scan --from``, ``scan --native``, ``matrix``)
take an executor and never ask which one it is.

Example::

    from loadguard.executors import resolve

    executor = resolve("ray:auto")          # or "local", "ray" (a local Ray cluster), "ray:10.0.0.1:6379"
    outcomes = executor.map(scan_one, models, jobs=8, timeout=900, memory_limit=8 << 30)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._infra import Outcome
from ..errors import InvalidOptionError


class Executor(Protocol):
    name: str
    """``local``, or ``ray`` with the address it was given (``ray:auto``)."""

    def slots(self, jobs: int) -> int:
        """How many items run at once given ``--jobs``: ``jobs`` here, the cluster's CPUs on Ray (unless ``jobs`` > 1)."""
        ...

    def map(
        self,
        function: Callable[[Any], Any],
        items: Sequence[Any],
        *,
        jobs: int = 1,
        timeout: float | None = None,
        memory_limit: int | None = None,
        on_done: Callable[[int, Outcome], None] | None = None,
        prepare: Callable[[], None] | None = None,
    ) -> list[Outcome]:
        """``function(item)`` for every item, each in a child process of its own stopped past ``timeout`` seconds or
        ``memory_limit`` added bytes; ``prepare()`` runs first in the process the children are forked from (imports
        they share); ``on_done(index, outcome)`` as each finishes. Never raises for an item: its outcome says why."""
        ...


def resolve(spec: str | Executor | None) -> Executor:
    """``local`` (the default), ``ray`` (connects to ``$RAY_ADDRESS`` if set, else starts a local Ray cluster),
    ``ray:auto`` (the cluster this machine belongs to) or ``ray:HOST:PORT``."""
    if spec is None or spec == "local":
        from ._local import LocalExecutor

        return LocalExecutor()
    if not isinstance(spec, str):
        return spec
    kind, _, address = spec.partition(":")
    if kind != "ray" or (spec.endswith(":") and not address):
        raise InvalidOptionError(
            f"--executor {spec!r} is not an executor", "use local, ray, ray:auto or ray:HOST:PORT"
        )
    from ._ray import RayExecutor

    return RayExecutor(address or None)


def split(items: list, count: int) -> list[list]:
    """``items`` in ``count`` contiguous groups of near-equal size (work of one kind shared among workers)."""
    count = max(1, min(count, len(items)))
    size, extra = divmod(len(items), count)
    out, at = [], 0
    for index in range(count):
        step = size + (1 if index < extra else 0)
        out.append(items[at : at + step])
        at += step
    return out


__all__ = ["Executor", "Outcome", "resolve", "split"]
