"""``loadguard.fix``: write the per-model source change a broken load needs, and prove it on both sides of v5.

The model is loaded as a user would (leftover memory poisoned, the workarounds its code needs), audited, and every
finding is traced to the line of the model's code that made the tensor; :mod:`loadguard._fix.plan` turns that into
edits. The patched copy is then proven before it is called fixed:

(a) it loads under the running transformers with leftover memory poisoned and **no workaround**, and audits clean
    (``partly``: every tensor the change answers is right, and nothing else broke);
(b) under the oldest supported transformers 4 (the matrix's environment) it loads to the very same tensors and first
    forward pass as the original (the fix changes nothing where the model was already right).

A patch that fails (a) or (b) is not written. The original folder is never written.

Example::

    result = loadguard.fix("./my-model", "./my-model-fixed", trust_remote_code=True)
    print(result.status)           # fixed | partly | not_fixed | clean | unverified
    print(result.diff)             # also in ./my-model-fixed/loadguard-fix.diff
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _audit
from .. import workarounds as registry
from .._audit import audit, load_unaudited
from .._infra import envs, forks, procs, remove_tree
from ..errors import FolderNotEmptyError, InvalidOptionError, LoadguardError, ModelNotFoundError
from ..report import Finding, FixStatus, Status, WorkaroundStatus
from .files import publish, stage
from .plan import Change, Refusal, plan_fix
from .upstream import upstream_patch

COMPAT_VERSION = "4.57.6"
"""The oldest transformers 4 loadguard supports: where proof (b) runs."""


@dataclass(frozen=True)
class Proof:
    """One proof of a patched copy: ``ok`` None when it was not run (``detail`` says why)."""

    name: str  # loads_right | unchanged_before_v5
    transformers: str
    ok: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "transformers": self.transformers, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class FixResult:
    """What ``loadguard.fix`` found, changed and proved. ``status``: ``fixed`` (every finding answered, both proofs
    passed), ``partly`` (some findings need a person: ``refused``), ``not_fixed`` (nothing could be changed, or a proof
    failed: nothing written), ``clean`` (the load was right: nothing to change), ``unverified`` (``verify=False``)."""

    model: str
    out: str | None
    status: FixStatus
    findings: tuple[Finding, ...]
    workarounds: tuple[str, ...]
    changes: tuple[Change, ...]
    refused: tuple[Refusal, ...]
    proofs: tuple[Proof, ...]
    diff: str
    versions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    upstream: str = ""
    """For tensors transformers' own classes leave wrong: the same change as a diff against the installed transformers
    source (``src/transformers/...``), for a pull request there; not applied, not proven by a load."""

    @property
    def ok(self) -> bool:
        return self.status in (FixStatus.FIXED, FixStatus.CLEAN)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "out": self.out,
            "status": self.status,
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings],
            "workarounds": list(self.workarounds),
            "changes": [c.to_dict() for c in self.changes],
            "refused": [r.to_dict() for r in self.refused],
            "proofs": [p.to_dict() for p in self.proofs],
            "diff": self.diff,
            "versions": dict(self.versions),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "upstream": self.upstream or None,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def fix(
    path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    trust_remote_code: bool = False,
    workarounds: Any = "auto",
    auto_class: str | None = None,
    verify: bool = True,
    compat_version: str = COMPAT_VERSION,
) -> FixResult:
    """Write ``out``: a copy of the model folder ``path`` (weights linked, never copied) whose code loads right on
    transformers 5, with ``LOADGUARD_FIX.md`` (the pull-request description) and ``loadguard-fix.diff``.

    ``workarounds``: what the load of the *original* may use (``"auto"``: the ones its failures call for); each one the
    load needed is replaced by the source edit it stands for, so the patched copy needs none. ``verify=False`` skips
    both proofs (the result says ``unverified``)."""

    folder, target = Path(path), Path(out)
    _check_paths(folder, target)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    model, early = load_unaudited(
        auto_class, folder, poison=True, workarounds=workarounds, trust_remote_code=trust_remote_code
    )
    report, _ = _audit.audit_after_load(model, registry.resolve(workarounds), folder, early=early)
    needed = tuple(o.name for o in early if o.status == WorkaroundStatus.APPLIED)
    seconds["audit"] = time.perf_counter() - start
    findings = tuple(report.failures)
    if not findings and not needed:
        return FixResult(
            str(path), None, FixStatus.CLEAN, findings, needed, (), (), (), "", dict(report.versions), seconds
        )
    plan = plan_fix(model, report, folder, list(needed))

    upstream = upstream_patch(model, report)
    del model
    diff = _diff(plan.original, plan.files)
    base = (str(path), findings, needed, tuple(plan.changes), tuple(plan.refused))
    if not plan.files:
        return FixResult(
            base[0], None, FixStatus.NOT_FIXED, *base[1:], (), "", dict(report.versions), seconds, upstream
        )
    staging = stage(folder, target, plan.files, diff)
    try:
        proofs: tuple[Proof, ...] = ()
        if verify:
            start = time.perf_counter()
            proofs = (_loads_right(staging, findings, plan.refused, auto_class),)
            seconds["prove_current"] = time.perf_counter() - start
            start = time.perf_counter()
            proofs += (_unchanged_before_v5(folder, staging, compat_version, needed),)
            seconds["prove_compat"] = time.perf_counter() - start
        status = _status(verify, proofs, plan.refused)
        result = FixResult(
            base[0],
            str(target) if status != FixStatus.NOT_FIXED else None,
            status,
            *base[1:],
            proofs,
            diff,
            dict(report.versions),
            seconds,
            upstream,
        )
        if status != FixStatus.NOT_FIXED:
            publish(staging, target, result)
        return result
    finally:
        if staging.exists():
            remove_tree(staging.parent, staging, "the fix being proven")


def _status(verify: bool, proofs: tuple[Proof, ...], refused: list[Refusal]) -> str:
    if not verify:
        return FixStatus.UNVERIFIED
    if any(p.ok is False for p in proofs):
        return FixStatus.NOT_FIXED
    if any(p.ok is None for p in proofs):
        return FixStatus.UNVERIFIED
    return FixStatus.PARTLY if refused else FixStatus.FIXED


def _check_paths(folder: Path, target: Path) -> None:

    if not folder.is_dir():
        raise ModelNotFoundError(
            f"{folder} is not a model folder",
            "pass the folder holding config.json and the model's code (a Hub id: download it first)",
        )
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FolderNotEmptyError(str(target))
    resolved, original = target.resolve(), folder.resolve()
    if resolved == original or original in resolved.parents:
        raise InvalidOptionError(
            f"--out {target} lies inside the model's folder {folder}",
            "write the fixed copy somewhere else: the original is never written",
        )


def _diff(original: dict[str, str], patched: dict[str, str]) -> str:
    parts = []
    for name in sorted(patched):
        parts += difflib.unified_diff(
            original[name].splitlines(True), patched[name].splitlines(True), f"a/{name}", f"b/{name}"
        )
    return "".join(parts)


def _run_json(command: list[str], env: dict | None = None, timeout: float = 900) -> dict:
    """A child process's JSON document: its whole stdout, else its last line that is a JSON object (the model's own prints
    come before it)."""
    with tempfile.TemporaryFile("w+") as err:
        result = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
            **procs.subprocess_options(),
        )  # a proof never outlives the run that started it
        err.seek(0)
        errors = err.read()
    try:
        return json.loads(result.stdout)
    except ValueError:
        pass
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    last = [line for line in errors.splitlines() if line.strip()]
    return {"error": last[-1] if last else f"exit {result.returncode}, nothing printed"}


def _audit_patched(arguments: tuple[str, str | None]) -> dict:
    """In a forked child (nothing of the original's load is active there): the patched copy loaded as a user would,
    leftover memory poisoned, no workaround, then audited."""

    folder, auto_class = arguments
    try:
        model, _ = load_unaudited(auto_class, folder, poison=True, workarounds=(), trust_remote_code=True)
    except LoadguardError as error:
        return {"error": error.message}
    return audit(model).to_dict()


def _loads_right(
    staging: Path, findings: tuple[Finding, ...], refused: list[Refusal], auto_class: str | None
) -> Proof:
    """(a): the patched copy, loaded in a child process with leftover memory poisoned and no workaround, audits clean
    (or, for a partial fix, fails only where the plan said a person must act)."""
    import transformers

    if forks.available():
        (outcome,) = forks.run(_audit_patched, [(str(staging), auto_class)], timeout=1800)
        document = outcome.value if outcome.ok else {"error": f"the process loading it failed: {outcome.error}"}
    else:  # no fork (Windows): a fresh interpreter
        command = [
            sys.executable,
            "-m",
            "loadguard",
            "audit",
            str(staging),
            "--trust-remote-code",
            "--poison",
            "--format",
            "json",
        ]
        document = _run_json(
            command + (["--auto-class", auto_class] if auto_class else []), {**os.environ, "LOADGUARD_DEBUG": ""}
        )
    version = transformers.__version__
    if document.get("error"):
        error = document["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        return Proof("loads_right", version, False, f"the patched copy does not load without workarounds: {message}")
    skipped = [c for c in document.get("checks", []) if not c.get("ran")]
    if skipped or not document.get("checks"):  # a check that did not run finds nothing: that is no proof
        why = "; ".join(f"{c['check']}: {c.get('reason') or 'did not run'}" for c in skipped) or "no check ran"
        return Proof(
            "loads_right", version, False, f"the audit of the patched copy could not check everything ({why})"
        )
    failing = {
        f["tensor"]
        for f in document.get("findings", [])
        if f["status"] in (Status.UNINITIALIZED, Status.MISMATCH, Status.ON_META, Status.OVERWRITTEN)
    }
    # a tensor that was wrong must come out right by the check that caught it: one that the patch merely moved out of
    # that check's sight (a tie no longer declared, so its table counts as a missing key "initialized") is not fixed
    before = {f.tensor: f.check for f in findings}
    failing |= {
        f["tensor"]
        for f in document.get("findings", [])
        if f["tensor"] in before and f["check"] != before[f["tensor"]]
    }
    left = {r.tensor for r in refused if r.tensor}
    unexpected = sorted(failing - left)
    if unexpected:
        return Proof(
            "loads_right",
            version,
            False,
            f"still wrong after the patch: {', '.join(unexpected[:6])}" + (" ..." if len(unexpected) > 6 else ""),
        )
    if failing:
        return Proof(
            "loads_right",
            version,
            True,
            f"{len(findings) - len(failing)} of {len(findings)} wrong tensors now load right; {len(failing)} need a person (refused)",
        )
    return Proof(
        "loads_right",
        version,
        True,
        f"loads with leftover memory poisoned and no workaround; audit clean ({len(findings)} tensors were wrong before)",
    )


def _unchanged_before_v5(folder: Path, staging: Path, version: str, workarounds: tuple[str, ...]) -> Proof:
    """(b): under transformers ``version`` the patched copy loads to the same tensors and first forward as the original."""

    environment = envs.environment(version)
    if not environment.ok:
        return Proof(
            "unchanged_before_v5",
            version,
            None,
            f"not run: the transformers {version} environment could not be created ({environment.reason})",
        )
    env = {**os.environ, "HF_MODULES_CACHE": str(environment.folder / "hf_modules"), "HF_HUB_OFFLINE": "1"}
    command = [
        str(environment.python),
        "-m",
        "loadguard._fix.prove",
        str(folder.resolve()),
        str(staging.resolve()),
        ",".join(workarounds),
    ]
    document = _run_json(command, env)
    if "error" in document:
        return Proof("unchanged_before_v5", version, False, f"could not be compared: {document['error']}")
    if document["differ_count"]:
        return Proof(
            "unchanged_before_v5",
            version,
            False,
            f"{document['differ_count']} tensors differ from the original's: {', '.join(document['differ'][:6])}",
        )
    if document["forward"].startswith("differs") and not document.get("repaired"):
        return Proof("unchanged_before_v5", version, False, f"the first forward pass {document['forward']}")
    repaired = document.get("repaired") or []
    same = document["tensors"] - len(repaired)
    also = (
        f"; {', '.join(repaired[:4])} ({len(repaired)}) the original loads wrong here too now equal what the code computes"
        if repaired
        else ""
    )
    return Proof(
        "unchanged_before_v5",
        document["transformers"],
        True,
        f"{same} of {document['tensors']} tensors bit-identical to the original's{also}; first forward: {document['forward']}",
    )


__all__ = ["COMPAT_VERSION", "FixResult", "Proof", "fix"]
