"""The results and their vocabulary: findings, audit reports and repair results (frozen data that serializes to JSON),
and every status and kind a result can carry, decided here once (the checks produce them, the report and the
front ends ask whether one fails; nothing else spells one as a string)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Vocabulary(str, Enum):
    """A word of loadguard's vocabulary: equal to, hashed as, printed and formatted as its string (``f"{status}"``
    gives ``uninitialized``, as JSON does)."""

    __str__ = str.__str__
    __format__ = str.__format__


class Status(Vocabulary):
    """What a finding says of a tensor."""

    OK = "ok"
    UNINITIALIZED = "uninitialized"
    MISMATCH = "mismatch"
    ON_META = "on_meta"
    OVERWRITTEN = "overwritten"
    UNVERIFIABLE = "unverifiable"
    CRASHED = "crashed"
    """Not a tensor: the loaded model's forward or generate raised (``audit --forward``, the check ``runs``)."""
    INITIALIZED = "initialized"
    """Not loaded, on request or as transformers reports (a key missing from the checkpoint, a size mismatch
    ignored with ``ignore_mismatched_sizes``), and holding a real value: initialized by the model's code. Reported,
    never failing."""


class Check(Vocabulary):
    NON_PERSISTENT_BUFFER = "non_persistent_buffer"
    CHECKPOINT_FIDELITY = "checkpoint_fidelity"
    MISSING_KEY = "missing_key"
    META_LEFTOVER = "meta_leftover"
    TIED_WEIGHTS = "tied_weights"
    RUNS = "runs"


FAILING_STATUSES = frozenset(
    {Status.UNINITIALIZED, Status.MISMATCH, Status.ON_META, Status.OVERWRITTEN, Status.CRASHED}
)


def is_failing(status: str | Status) -> bool:
    return Status(status) in FAILING_STATUSES


class WorkaroundStatus(Vocabulary):
    """What became of a workaround in one load (or, ``needed``, in a scan's prediction)."""

    APPLIED = "applied"
    STALE = "stale"
    NOT_APPLICABLE = "not_applicable"
    NEEDED = "needed"


class FixStatus(Vocabulary):
    """What ``loadguard.fix`` achieved (see :class:`loadguard.FixResult`)."""

    FIXED = "fixed"
    PARTLY = "partly"
    NOT_FIXED = "not_fixed"
    CLEAN = "clean"
    UNVERIFIED = "unverified"


class ChangeKind(Vocabulary):
    """The kind of one edit ``loadguard fix`` makes to a model's code."""

    RECOMPUTE = "recompute"
    KEEP_ARGUMENTS = "keep_arguments"
    GUARD_OVERWRITES = "guard_overwrites"
    WORKAROUND = "workaround"


class CellStatus(Vocabulary):
    """One model under one transformers version in a matrix."""

    CLEAN = "clean"
    FINDINGS = "findings"
    ERROR = "error"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Finding:
    """One tensor that is not (or cannot be shown to be) what the model's code and checkpoint define.

    ``max_abs_diff`` is ``None`` when no comparison was possible or the difference is not finite.
    """

    tensor: str
    kind: str  # "parameter" | "buffer"
    check: str  # a Check value
    status: Status
    dtype: str
    shape: tuple[int, ...]
    device: str
    detail: str
    max_abs_diff: float | None = None
    persistent: bool = True
    alias_of: str | None = None
    predicted: bool = False
    """True in a scan: what a load of the checkpoint would leave, predicted without reading weights."""
    location: str | None = None
    """``file:line`` of the code that made the tensor while the model was constructed (its ``register_buffer``, the
    assignment, the layer built there): a remote-code file as the model's folder names it, transformers' own as
    ``transformers/models/...``. None when the reference could not be built."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        """The finding :meth:`to_dict` wrote (derived keys such as ``module`` are recomputed, not read)."""
        fields = {k: (tuple(v) if k == "shape" else v) for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**fields, "status": Status(fields["status"])} if "status" in fields else fields)

    @property
    def module(self) -> str:
        """The dotted path of the module that owns the tensor (``""`` for the model itself)."""
        return self.tensor.rpartition(".")[0]

    @property
    def failing(self) -> bool:
        return is_failing(self.status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "kind": self.kind,
            "check": self.check,
            "status": self.status,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "device": self.device,
            "persistent": self.persistent,
            "alias_of": self.alias_of,
            "max_abs_diff": self.max_abs_diff,
            "detail": self.detail,
            "predicted": self.predicted,
            "module": self.module,
            "location": self.location,
        }


def failing(findings: list[dict]) -> list[dict]:
    """The findings, as a report's JSON holds them, whose status fails an audit (as :attr:`Finding.failing`)."""
    return [f for f in findings if is_failing(f["status"])]


@dataclass(frozen=True)
class CheckSummary:
    """How one check went: how many tensors it looked at and what it found, or why it did not run."""

    check: str
    ran: bool
    checked: int = 0
    failed: int = 0
    unverifiable: int = 0
    reason: str = ""
    initialized: int = 0
    """Tensors not loaded on request or as transformers reports (missing keys, ignored size mismatches) that hold a
    real value."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "ran": self.ran,
            "checked": self.checked,
            "failed": self.failed,
            "unverifiable": self.unverifiable,
            "initialized": self.initialized,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class AuditReport:
    """What ``loadguard.audit`` found.

    ``ok`` is False when any finding has a failing status (uninitialized, mismatch, on_meta,
    overwritten); unverifiable and initialized findings are reported but do not fail.

    Example::

        report = loadguard.audit(model)
        if not report.ok:
            for f in report.failures:
                print(f.tensor, f.status, f.detail)
        print(report.to_json())
    """

    model: str
    model_class: str
    checkpoint: str | None
    findings: tuple[Finding, ...]
    checks: tuple[CheckSummary, ...]
    unexpected_checkpoint_keys: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    workarounds: tuple[Any, ...] = ()
    """:class:`loadguard.workarounds.WorkaroundOutcome` of every workaround applied or found stale."""
    mode: str = "audit"
    """``audit`` (a loaded model compared tensor by tensor) or ``scan`` (a load predicted without weights)."""
    method: str = ""
    """How the model was obtained, where it matters to the verdict (a scan: the weightless load and what it skips)."""
    revision: str | None = None
    """The commit a Hub id resolved to (a scan of a Hub id): a fingerprint or a baseline refers to that revision."""
    fetched_bytes: int | None = None
    """File content fetched from the Hub for a scan (0: all of it was cached); None when nothing came from the Hub."""
    _context: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not any(f.failing for f in self.findings)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.failing)

    def summary(self, check: str) -> CheckSummary:
        """The summary of one check, by name (e.g. ``"non_persistent_buffer"``)."""
        name = getattr(check, "value", check)
        return next(s for s in self.checks if s.check == name)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per check: how many findings of each status."""
        out: dict[str, dict[str, int]] = {}
        for finding in self.findings:
            out.setdefault(finding.check, {}).setdefault(finding.status, 0)
            out[finding.check][finding.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_class": self.model_class,
            "mode": self.mode,
            "method": self.method or None,
            "checkpoint": self.checkpoint,
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings],
            "checks": [s.to_dict() for s in self.checks],
            "counts": self.counts(),
            "unexpected_checkpoint_keys": list(self.unexpected_checkpoint_keys),
            "workarounds": [w.to_dict() for w in self.workarounds],
            "versions": dict(self.versions),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            **({"revision": self.revision} if self.revision else {}),
            **({"fetched_bytes": self.fetched_bytes} if self.fetched_bytes is not None else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)


@dataclass(frozen=True)
class Unrepaired:
    tensor: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"tensor": self.tensor, "reason": self.reason}


@dataclass(frozen=True)
class RepairResult:
    """What ``loadguard.repair`` changed and whether the model now audits clean.

    ``before`` is the report that was repaired, ``after`` the re-audit; ``unrepaired`` lists the failing
    tensors no value could be found for, with the reason.
    """

    repaired: tuple[str, ...]
    unrepaired: tuple[Unrepaired, ...]
    before: AuditReport
    after: AuditReport

    @property
    def ok(self) -> bool:
        return self.after.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "repaired": list(self.repaired),
            "unrepaired": [u.to_dict() for u in self.unrepaired],
            "ok": self.ok,
            "after": self.after.to_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN or infinity: such differences are reported as None (the detail says why)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)
