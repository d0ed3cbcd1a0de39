"""The proofs of ``loadguard fix``, run from the process that planned the patch: (a) the patched copy loads right on
this transformers (a child loads and audits it; without weights, a scan predicts its load), (b) under transformers 4
(the matrix's environment, :mod:`loadguard._fix.prove` on that side) it loads to the same tensors and first forward as
the original, on the release the model was written for when that is older than 4.57."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._audit import audit, load_unaudited, repair
from .._hf import init_weights_calls, synthetic, tokenized
from .._hf import model_outputs as run_outputs
from .._infra import forks, plural, procs
from .._scan import scan
from ..errors import LoadguardError
from ..report import Finding, Status
from ..workarounds import fixes_for
from .coverage import LinesRun
from .plan import Refusal
from .saving import saves_and_reloads, synthetic_saves

COMPAT_VERSION = "4.57.6"
"""The oldest transformers 4 loadguard supports: where proof (b) runs."""


@dataclass(frozen=True)
class Proof:
    """One proof of a patched copy: ``ok`` None when it was not run (``detail`` says why)."""

    name: str  # loads_right | unchanged_before_v5 | same_outputs | copy_untouched
    transformers: str
    ok: bool | None
    detail: str
    weightless: bool = False
    """Run without weights: (a) a scan's prediction of the load, (b) both codes constructed from the config."""
    measured: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What the proof measured (``same_outputs``: ``max_abs_diff``, ``tolerance``, the tokens of both sides)."""

    @property
    def said(self) -> str:
        """The detail as a line after the verdict word says it: a proof not run is not "not run: not run: ..."."""
        return self.detail.removeprefix("not run: ") if self.ok is None else self.detail

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transformers": self.transformers,
            "ok": self.ok,
            "detail": self.detail,
            "weightless": self.weightless,
            "measured": dict(self.measured),
        }


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


def _synthetic_outputs(folder: str, class_name: str | None) -> dict:
    """Without weights, proof (c)'s 5.x side: the patched copy built from its config (no workaround) with the synthetic
    weights the 4.x side gives the original, its forward and greedy tokens (on the prompt its tokenizer encodes, when it
    has one: ``ids``, handed to the 4.x side)."""
    try:
        model, why = synthetic(folder, class_name)
    except Exception as error:  # the model's own construction failed: (c) says so
        return {"not_built": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]}
    if model is None:
        return {"not_built": why}
    ids = tokenized(folder)
    return {**run_outputs(model, fixes=fixes_for, ids=ids), "synthetic": True, "ids": ids, "shrunk": why}


def _audit_patched(arguments: tuple[str, str | None, bool, bool, str | None, tuple[str, ...]]) -> dict:
    """The proof (a) process, its lines run traced in the patched files (``names``): :func:`_proven` does the work."""
    *rest, names = arguments
    with LinesRun(set(names)) as traced:
        document = _proven(tuple(rest))
    document["lines_run"] = traced.to_dict()
    return document


def _proven(arguments: tuple[str, str | None, bool, bool, str | None]) -> dict:
    """In a forked child (nothing of the original's load is active there): the patched copy loaded as a user would,
    leftover memory poisoned, no workaround, then audited; without weights, the same load predicted by a scan. Either
    way the copy is saved with ``save_pretrained`` and loaded again (:func:`saves_and_reloads`; without weights, the
    model built from its config with synthetic values)."""

    folder, auto_class, weightless, taken, class_name = arguments
    try:
        if weightless:
            document = scan(folder, model_class=auto_class, workarounds=(), trust_remote_code=True).to_dict()
            if taken:  # before the save: a load of what it wrote registers its classes, which a build here would take
                document["outputs"] = _synthetic_outputs(folder, class_name)
            document["saves"] = synthetic_saves(folder, class_name, auto_class)
            return document
        with init_weights_calls() as called:
            model, _ = load_unaudited(auto_class, folder, poison=True, workarounds=(), trust_remote_code=True)
    except LoadguardError as error:
        return {"error": error.message}
    ran = sorted(name for name, module in model.named_modules() if id(module) in called)
    report = audit(model)
    still_wrong = {f.tensor for f in report.failures}
    if not taken:
        return {
            **report.to_dict(),
            "init_weights_ran": ran,
            "saves": saves_and_reloads(model, auto_class, still_wrong),
        }
    ids = tokenized(folder)  # the model's own tokenizer, when it has one (ChatGLM's prompt needs its gMASK token)
    # proof (c) runs the copy as a user would once they did what the plan left for a person: its refused tensors set
    # to what the code computes (in memory, here only), so the outputs compare the change, not the known gap
    set_by_hand = [f.tensor for f in report.failures] if report.failures and repair(model, report).ok else []
    outputs = {**run_outputs(model, fixes=fixes_for, ids=ids), "set_by_hand": set_by_hand, "ids": ids}
    # the save last: loading what it wrote registers its classes with the auto classes
    return {
        **report.to_dict(),
        "init_weights_ran": ran,
        "saves": saves_and_reloads(model, auto_class, still_wrong),
        "outputs": outputs,
    }


def saved(document: dict, version: str, weightless: bool = False) -> Proof | None:
    """The save-and-reload check as a proof row (None where proof (a)'s process took none: it did not load)."""
    found = document.get("saves")
    if not isinstance(found, dict):
        return None
    return Proof("saves_and_reloads", version, found.get("ok"), str(found.get("detail", "")), weightless)


def run_patched(
    staging: Path,
    auto_class: str | None,
    weightless: bool = False,
    outputs: bool = True,
    class_name: str | None = None,
    traced: tuple[str, ...] = (),
) -> dict:
    """The patched copy loaded in a child process with leftover memory poisoned and no workaround, audited (``weightless``:
    its load as a scan predicts it): the audit's document, and under ``"outputs"`` the copy's outputs on this
    transformers (:func:`loadguard._hf.inputs.model_outputs`: proof (c)'s side; absent without weights or without a fork, or
    when not ``outputs``); under ``"lines_run"`` the lines of the files named in ``traced`` that ran there (file name ->
    line numbers: what of the edit the proofs reached)."""
    if forks.available():
        (outcome,) = forks.run(
            _audit_patched, [(str(staging), auto_class, weightless, outputs, class_name, traced)], timeout=1800
        )
        document = outcome.value if outcome.ok else {"error": f"the process loading it failed: {outcome.error}"}
    else:  # no fork (Windows): a fresh interpreter
        command = [
            sys.executable,
            "-m",
            "loadguard",
            *(("scan", str(staging)) if weightless else ("audit", str(staging), "--poison")),
            "--trust-remote-code",
            "--format",
            "json",
        ]
        document = _run_json(
            command + (["--auto-class", auto_class] if auto_class else []), {**os.environ, "LOADGUARD_DEBUG": ""}
        )
    return document


def loads_right(
    document: dict, findings: tuple[Finding, ...], refused: list[Refusal], weightless: bool = False
) -> Proof:
    """(a): the patched copy's audit (:func:`run_patched`'s ``document``) is clean (or, for a partial fix, fails only
    where the plan said a person must act); ``weightless``: its load as a scan predicts it (transformers' own pipeline
    on weightless tensors)."""
    import transformers

    proof = functools.partial(Proof, weightless=weightless)
    version = transformers.__version__
    if document.get("error"):
        error = document["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        return proof("loads_right", version, False, f"the patched copy does not load without workarounds: {message}")
    skipped = [c for c in document.get("checks", []) if not c.get("ran")]
    if skipped or not document.get("checks"):  # a check that did not run finds nothing: that is no proof
        why = "; ".join(f"{c['check']}: {c.get('reason') or 'did not run'}" for c in skipped) or "no check ran"
        return proof(
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
        return proof(
            "loads_right",
            version,
            False,
            f"still wrong after the patch: {'; '.join(_why_wrong(document, name) for name in unexpected[:6])}"
            + (" ..." if len(unexpected) > 6 else ""),
        )
    if failing:
        return proof(
            "loads_right",
            version,
            True,
            f"{len(findings) - len(failing)} of {plural(len(findings), 'wrong tensor')} now load right; "
            f"{len(failing)} need a person (refused)",
        )
    return proof(
        "loads_right",
        version,
        True,
        (
            "its load as a scan predicts it without weights (transformers' own pipeline, no workaround) is clean"
            if weightless
            else "loads with leftover memory poisoned and no workaround; audit clean"
        )
        + f" ({plural(len(findings), 'tensor')} {'was' if len(findings) == 1 else 'were'} wrong before)",
    )


def _why_wrong(document: dict, tensor: str) -> str:
    """A tensor still wrong after the patch, in the user's terms: its dtype and device, the largest difference, and
    whether transformers called ``_init_weights`` for its module at all (a branch it never reaches is dead code)."""
    finding = next((f for f in document.get("findings", []) if f["tensor"] == tensor), {})
    facts = [f"{finding.get('dtype', '?')} on {finding.get('device', '?')}"]
    if finding.get("max_abs_diff") is not None:
        facts.append(f"max |diff| {finding['max_abs_diff']:.3g}")
    if "init_weights_ran" in document:
        module = tensor.rpartition(".")[0]
        ran = module in document["init_weights_ran"]
        facts.append(
            f"_init_weights ran for {module or 'the model'}"
            if ran
            else f"_init_weights never ran for {module or 'the model'} (transformers skipped it: all it holds loaded)"
        )
    return f"{tensor} ({', '.join(facts)})"


__all__ = ["COMPAT_VERSION", "Proof", "loads_right", "run_patched", "saved"]
