"""The ``local`` executor: children forked on this machine (:mod:`loadguard._infra.forks`)."""

from __future__ import annotations

from .._infra import forks


class LocalExecutor:
    name = "local"

    def slots(self, jobs: int) -> int:
        return jobs

    def map(self, function, items, *, jobs=1, timeout=None, memory_limit=None, on_done=None, prepare=None):
        if prepare is not None:
            prepare()  # imported once here, before any fork: a child pays only its own work
        return forks.run(function, list(items), jobs=jobs, timeout=timeout, memory_limit=memory_limit, on_done=on_done)


__all__ = ["LocalExecutor"]
