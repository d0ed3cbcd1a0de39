"""``poison()``: make every uninitialized allocation deterministic while a model loads.

Leftover memory from ``torch.empty*`` is whatever the allocator hands back: zeros one run, 1e37 the next.
Inside ``poison()`` torch fills it instead: NaN for floating point and complex tensors, the largest value
for integer tensors and ``True`` for bools. A tensor that a loader forgot to initialize then fails the
same way on every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.utils.deterministic


@contextmanager
def poison() -> Iterator[None]:
    """Fill uninitialized memory with NaN / INT_MAX / True for the duration of the block.

    Restores both global torch settings it touches (deterministic algorithms and
    ``torch.utils.deterministic.fill_uninitialized_memory``) on exit, exceptions included; nesting is
    safe. It is process-global state: do not rely on it from several threads at once. Filling costs a
    write of every allocation, so keep the block around the load only.

    Example::

        import loadguard
        from transformers import AutoModel

        with loadguard.poison():
            model = AutoModel.from_pretrained(path, trust_remote_code=True)
        # a buffer transformers left uninitialized is now all NaN instead of random garbage
    """
    previous_enabled = torch.are_deterministic_algorithms_enabled()
    previous_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_fill = torch.utils.deterministic.fill_uninitialized_memory
    try:
        # Keep a user's strict determinism strict; otherwise only warn about nondeterministic kernels.
        torch.use_deterministic_algorithms(True, warn_only=previous_warn_only if previous_enabled else True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        yield
    finally:
        torch.use_deterministic_algorithms(previous_enabled, warn_only=previous_warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = previous_fill
