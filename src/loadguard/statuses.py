"""The vocabulary of a verdict: the statuses a finding can have, the checks that produce them, and which statuses fail
an audit. Decided here once, below both the checks (which produce findings) and the report (which asks whether one
fails)."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    OK = "ok"
    UNINITIALIZED = "uninitialized"
    MISMATCH = "mismatch"
    ON_META = "on_meta"
    OVERWRITTEN = "overwritten"
    UNVERIFIABLE = "unverifiable"
    INITIALIZED = "initialized"
    """Not loaded, on request or as transformers reports (a key missing from the checkpoint, a size mismatch
    ignored with ``ignore_mismatched_sizes``), and holding a real value: initialized by the model's code. Reported,
    never failing."""


class Check(str, Enum):
    NON_PERSISTENT_BUFFER = "non_persistent_buffer"
    CHECKPOINT_FIDELITY = "checkpoint_fidelity"
    MISSING_KEY = "missing_key"
    META_LEFTOVER = "meta_leftover"
    TIED_WEIGHTS = "tied_weights"


FAILING_STATUSES = frozenset({Status.UNINITIALIZED, Status.MISMATCH, Status.ON_META, Status.OVERWRITTEN})


def is_failing(status: str | Status) -> bool:
    return Status(status) in FAILING_STATUSES


__all__ = ["Check", "FAILING_STATUSES", "Status", "is_failing"]
