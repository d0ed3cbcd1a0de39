"""One model's result as every emitter reads it: what was found, or why it could not be checked, and where its code
lives (to turn a finding's ``file:line`` into a path a CI system can open)."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..report import AuditReport, CheckSummary, Finding


@dataclass(frozen=True)
class RunFailure:
    """What running the loaded model did wrong (``compare``, ``trace``), beside the tensors the audit names: ``kind``
    ``raised`` (its code raised where the reference runs), ``differ`` (its outputs differ from the reference's) or
    ``non_finite`` (NaN/Inf first came out of ``module``); ``location`` the ``file:line`` behind it when known."""

    kind: str
    message: str
    module: str | None = None
    location: str | None = None

    @property
    def tensor(self) -> str:
        """What a finding's ``tensor`` is to an emitter: the module, else the model's outputs."""
        return self.module or "(outputs)"


@dataclass(frozen=True)
class Row:
    """``model`` as the user named it; ``folder`` its local folder (None for a Hub id or a native class); ``findings``
    every finding (failing ones in :attr:`failures`); ``error`` why it could not be checked, with ``hint``;
    ``run_failure`` what running it did wrong (``compare``, ``trace``), its findings being the tensors behind that."""

    model: str
    model_class: str = ""
    mode: str = "audit"
    folder: str | None = None
    findings: tuple[Finding, ...] = ()
    checks: tuple[CheckSummary, ...] = ()
    error: str | None = None
    hint: str | None = None
    run_failure: RunFailure | None = None
    revision: str | None = None
    """The commit a Hub id resolved to: the model's identity includes it."""
    checkpoint: str | None = None
    """Where a scan's keys came from, or what it assumed without checkpoint headers."""

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.failing)

    @property
    def checked(self) -> bool:
        return self.error is None

    @property
    def ok(self) -> bool:
        return self.checked and not self.failures and self.run_failure is None

    @classmethod
    def from_report(cls, report: AuditReport, model: str) -> Row:
        return cls(model, report.model_class, report.mode, _local(model), report.findings, report.checks)

    @classmethod
    def from_scan(cls, row: dict[str, Any]) -> Row:
        """A scan's JSON row (``loadguard scan --format json``)."""
        if not row.get("scanned"):
            error = row.get("error")
            if isinstance(error, dict):  # as --format json prints it: {kind, message, hint, fixes}
                return cls(
                    row["model"],
                    row.get("model_class", ""),
                    "scan",
                    _local(row["model"]),
                    error=error.get("message"),
                    hint=error.get("hint"),
                )
            return cls(
                row["model"],
                row.get("model_class", ""),
                "scan",
                _local(row["model"]),
                error=error,
                hint=row.get("hint"),
            )
        findings = tuple(Finding.from_dict(f) for f in row["findings"])
        checks = tuple(CheckSummary(**c) for c in row.get("checks", ()))
        return cls(
            row["model"],
            row.get("model_class", ""),
            "scan",
            _local(row["model"]),
            findings,
            checks,
            revision=row.get("revision"),
            checkpoint=row.get("checkpoint"),
        )

    @classmethod
    def from_audit(cls, document: dict[str, Any], model: str) -> Row:
        """An audit's JSON document (``loadguard audit --format json``), also the one for a model that could not be
        loaded (``ok`` false, ``error``: kind, message, hint)."""
        error = document.get("error")
        if error:
            return cls.failed(model, error.get("message", ""), error.get("hint"), "audit")
        findings = tuple(Finding.from_dict(f) for f in document.get("findings", ()))
        checks = tuple(CheckSummary(**c) for c in document.get("checks", ()))
        return cls(model, document.get("model_class", ""), "audit", _local(model), findings, checks)

    @classmethod
    def from_run(cls, model: str, model_class: str, mode: str, findings=(), failure: RunFailure | None = None) -> Row:
        """A run of the model (``compare``, ``trace``): what it did wrong, if anything, and the tensors behind it."""
        return cls(model, model_class, mode, _local(model), tuple(findings), run_failure=failure)

    @classmethod
    def failed(cls, model: str, error: str, hint: str | None, mode: str = "audit") -> Row:
        return cls(model, "", mode, _local(model), error=error, hint=hint)

    @functools.cached_property
    def identity(self) -> str:
        """The model as the same model on any machine and in any folder: its class and the digest of its config.json
        (never a temporary folder's path), or the name it was given (a Hub id, a native class). Read once a row."""
        config = Path(self.folder, "config.json") if self.folder else None
        if config is not None and config.is_file():
            return f"{self.model_class}@{hashlib.sha256(config.read_bytes()).hexdigest()[:16]}"
        if self.revision:  # a Hub id: that exact commit
            return f"{self.model.split('@')[0]}@{self.revision}"
        return self.model

    def fingerprint(self, finding: Finding | RunFailure) -> str:
        """Stable across runs and machines: the model's identity, the tensor (or module) and what is wrong with it."""
        if isinstance(finding, RunFailure):
            return hashlib.sha256(f"{self.identity}|{finding.tensor}|{self.mode}|{finding.kind}".encode()).hexdigest()
        return hashlib.sha256(
            f"{self.identity}|{finding.tensor}|{finding.check}|{finding.status}".encode()
        ).hexdigest()

    def source(self, finding: Finding | RunFailure) -> tuple[str, int, bool] | None:
        """``(path, line, in_model)`` of the finding's code: in the model's folder (a path relative to the current
        directory), else the installed package's (``transformers/models/...``, ``in_model`` False)."""
        if not finding.location or ":" not in finding.location:
            return None
        file, _, line = finding.location.rpartition(":")
        if not line.isdigit():
            return None
        if self.folder and Path(self.folder, file).is_file():
            return os.path.relpath(Path(self.folder, file)), int(line), True
        return file, int(line), False


def _local(model: str) -> str | None:
    return model if model and Path(model).is_dir() else None


__all__ = ["Row", "RunFailure"]
