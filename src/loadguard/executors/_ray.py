"""The ``ray`` executor: each item a Ray task (one CPU, retried once if its worker dies), which forks the same child
the local executor would on the node it landed on, so ``timeout`` and ``memory_limit`` hold there and one model's code
never shares a process with the next. Imported only when chosen; Ray is the optional extra ``loadguard[ray]``."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

from .._infra import Outcome, forks
from ..errors import ExecutorError

RETRIES = 1
"""A task whose worker process dies (killed, out of memory, its node gone) runs once more, then is reported."""
STALL = 120.0
"""Seconds past an item's ``timeout`` with no task finishing before the rest are cancelled and reported (never hangs)."""


_PASSED = ("HF_", "TRANSFORMERS_", "LOADGUARD_", "TORCH_HOME", "NO_COLOR")
"""The driver's environment variables a task sees too (where the Hub cache is, offline mode, loadguard's cache)."""


def _task(function, item, timeout, memory_limit, prepare, context) -> tuple[Outcome, str]:
    """On a Ray worker: the item in a child forked for it alone, under the same limits as a local run, in the driver's
    working directory when this node has it (relative model paths mean the same; a cluster shares its storage)."""

    cwd, variables = context
    os.environ.update(variables)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.path.isdir(cwd):
        os.chdir(cwd)
    if prepare is not None:
        prepare()  # once per worker in effect: what it imports stays for the next task
    outcome = forks.run(function, [item], jobs=1, timeout=timeout, memory_limit=memory_limit)[0]
    import ray

    return outcome, ray.get_runtime_context().get_node_id()


class RayExecutor:
    def __init__(self, address: str | None = None):
        if importlib.util.find_spec("ray") is None:
            raise ExecutorError(
                "--executor ray needs Ray, which is not installed here", "pip install 'loadguard[ray]'"
            )
        self.address = address
        self.name = "ray" + (f":{address}" if address else "")
        self.ran_on: dict[int, str] = {}
        """Per item index: the Ray node id its run finished on."""

    def _connect(self):
        import ray

        if not ray.is_initialized():
            try:
                # Ray's own log lines (how it connected, its token mode) off stderr: only errors, as loadguard's
                ray.init(
                    address=self.address,
                    log_to_driver=False,
                    include_dashboard=False,
                    configure_logging=True,
                    logging_level=logging.ERROR,
                    ignore_reinit_error=True,
                )
            except (ConnectionError, RuntimeError, ValueError) as error:
                where = self.address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
                raise ExecutorError(
                    f"could not start or reach the Ray cluster ({where}): {error}",
                    "start a cluster with Ray's own 'ray start' (its head node first), or pass --executor ray:HOST:PORT of a running one",
                ) from error
        return ray

    def slots(self, jobs: int) -> int:
        """Tasks submitted at once: ``jobs`` when given (>1), else the cluster's CPUs."""
        ray = self._connect()
        return max(1, jobs if jobs > 1 else int(ray.cluster_resources().get("CPU", 1)))

    def map(self, function, items, *, jobs=1, timeout=None, memory_limit=None, on_done=None, prepare=None):
        ray = self._connect()
        remote = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(_task)
        items = list(items)
        queue = list(range(len(items)))[::-1]
        pending: dict[Any, int] = {}
        outcomes: dict[int, Outcome] = {}
        limit = self.slots(jobs)
        stall = None if timeout is None else timeout + STALL
        context = ray.put((os.getcwd(), {k: v for k, v in os.environ.items() if k.startswith(_PASSED)}))

        def done(index: int, outcome: Outcome) -> None:
            outcomes[index] = outcome
            if on_done is not None:
                on_done(index, outcome)

        while queue or pending:
            while queue and len(pending) < limit:
                index = queue.pop()
                pending[remote.remote(function, items[index], timeout, memory_limit, prepare, context)] = index
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=stall)
            if not ready:  # the cluster stopped answering: cancel and report, never wait forever
                for ref, index in list(pending.items()):
                    ray.cancel(ref, force=True)
                    done(
                        index,
                        Outcome(False, error=f"no Ray task finished within {stall:g} s: cancelled", killed="timeout"),
                    )
                for index in queue:
                    done(index, Outcome(False, error="not run: the Ray cluster stopped finishing tasks"))
                break
            for ref in ready:
                index = pending.pop(ref)
                try:
                    outcome, node = ray.get(ref)
                    self.ran_on[index] = node
                except ray.exceptions.RayError as error:  # its worker died twice (retried once), or its node went away
                    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                    outcome = Outcome(
                        False, error=f"its Ray worker died (run {RETRIES + 1} times): {type(error).__name__}: {first}"
                    )
                done(index, outcome)
        return [outcomes[index] for index in range(len(items))]


__all__ = ["RayExecutor"]
