"""``loadguard.fix``: write the per-model source change a broken load needs, and prove it on both sides of v5.

The model is loaded as a user would (leftover memory poisoned, the workarounds its code needs), audited, and every
finding is traced to the line of the model's code that made the tensor; :mod:`loadguard._fix.plan` turns that into
edits. The patched copy is then proven before it is called fixed:

(a) it loads under the running transformers with leftover memory poisoned and **no workaround**, and audits clean
    (``partly``: every tensor the change answers is right, and nothing else broke);
(b) under the oldest supported transformers 4 (the matrix's environment) it loads to the very same tensors and first
    forward pass as the original (the fix changes nothing where the model was already right);
(c) on the running transformers it answers as the original answered there: logits within the dtype's tolerance and
    the same greedy tokens, on inputs built from the config (it runs on 5.x as it did on 4.x, past the load);
and the copy the proofs ran is byte for byte the copy that was staged (the model's code ran in them: a file it wrote,
planted or removed there is a failed ``copy_untouched`` row, and nothing is published).

A patch that fails (a) or (b) is not written. The original folder is never written.

Example::

    result = loadguard.fix("./my-model", "./my-model-fixed", trust_remote_code=True)
    print(result.status)           # fixed | partly | not_fixed | clean | unverified
    print(result.diff)             # also in ./my-model-fixed/loadguard-fix.diff
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _audit
from .. import workarounds as registry
from .._audit import load_unaudited
from .._hf import init_weights_calls
from .._infra import remove_tree
from .._scan import scan_with_model
from ..errors import FolderNotEmptyError, InvalidOptionError, ModelNotFoundError
from ..report import Finding, FixStatus, WorkaroundStatus
from ..runner import rebuilt
from .across import same_outputs
from .checks import diff_of, static_checks
from .compat import before_v5_on_first, written_for
from .coverage import not_run
from .files import cached_module_glob, digest, holds_weights, publish, stage, tampered
from .past import breaks_when_run, needed_past_the_load
from .plan import Change, Refusal, plan_fix
from .proofs import Proof, loads_right, run_patched, saved
from .upstream import upstream_patch


@dataclass(frozen=True)
class FixResult:
    """What ``loadguard.fix`` found, changed and proved. ``status``: ``fixed`` (every finding answered, the proofs
    passed: (a) loads right, (b) unchanged on 4.x, (c) the same outputs as on 4.x), ``partly`` (some findings need a
    person: ``refused``), ``not_fixed`` (nothing could be changed, or a proof failed: nothing written), ``clean`` (the
    load was right: nothing to change), ``unverified`` (``verify=False``, or a proof could not run)."""

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
    weightless: bool = False
    """The folder held no checkpoint: the findings are a scan's predictions and the proofs ran without weights."""
    weights: str = ""
    """How the written copy holds the weights: ``hard-linked`` (writing them in place changes the original's),
    ``symlinked`` (another file system: the original must stay), ``copied`` (``copy_weights=True``); ``""``: none."""
    auto_class: str = ""
    """The auto class the model was loaded with (``AutoModelForCausalLM``): what the reproduction in the PR text uses."""
    unrun: tuple[str, ...] = ()
    """Lines the change added that no proof ran (``file:line``), said in the output and the PR text."""
    checked: str = ""
    """What was run to find the model's problems (a ``clean`` result says so: what it means is what was run)."""

    @property
    def ok(self) -> bool:
        return self.status in (FixStatus.FIXED, FixStatus.CLEAN)

    def proof(self, name: str) -> Proof | None:
        """The proof row called ``name`` (``loads_right``, ``diff_applies``, ...), None when it was not taken."""
        return next((proof for proof in self.proofs if proof.name == name), None)

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
            "weightless": self.weightless,
            "weights": self.weights or None,
            "auto_class": self.auto_class or None,
            "unrun": list(self.unrun),
            "checked": self.checked,
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
    compat_version: str | None = None,
    weights: bool = True,
    name: str | None = None,
    copy_weights: bool = False,
    prove_outputs: bool = True,
) -> FixResult:
    """Write ``out``: a copy of the model folder ``path`` (weights linked, never copied) whose code loads right on
    transformers 5, with ``LOADGUARD_FIX.md`` (the pull-request description) and ``loadguard-fix.diff``.

    ``workarounds``: what the load of the *original* may use (``"auto"``: the ones its failures call for); each one the
    load needed is replaced by the source edit it stands for, so the patched copy needs none. ``verify=False`` skips
    the proofs (the result says ``unverified``). ``compat_version``: the transformers 4 of proof (b); default: the 4.x
    the model was written for (config.json's ``transformers_version``, when older than 4.57), else (it cannot be
    installed, or the original does not load there) 4.57.6.

    Without weights (a folder of code and config, or ``weights=False``), the same change is planned from a scan (the
    load transformers would do, predicted from weightless tensors) and proven without weights: (a) the scan of the
    patched copy is clean, (b) on transformers 4 both codes build the same buffers and tensor attributes and
    parameters of the same names, shapes and dtypes; ``result.weightless`` and each proof say so. ``name``: how the
    result names the model (a Hub id whose snapshot ``path`` is; default: ``path``). ``copy_weights``: the copy holds its own
    weights, not hard links to the original's (which a program writing them in place would change).

    Proof (c), ``same_outputs``: the patched copy on this transformers answers as the original did on proof (b)'s
    release (same weights; inputs built from the config: logits within the dtype's tolerance, every position's token in
    the other side's top 5, the same greedy tokens), so ``fixed`` means "runs on 5.x as it did on 4.x".
    Without weights, (c) builds both from the config and gives every parameter the same synthetic values (a model of
    more than 300 M parameters from a shrunk copy of its config, the same on both sides, named in the proof). ``prove_outputs=False`` leaves (c) out (and the status then
    rests on (a) and (b), as before (c) existed)."""

    folder, target, label = Path(path), Path(out), name or str(path)
    _check_paths(folder, target)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    weightless = not weights or not holds_weights(folder)
    with init_weights_calls() as called:  # which modules transformers really runs _init_weights for, observed
        if weightless:  # code and config alone: the load a scan predicts, from the same pipeline, no weight read
            model, report = scan_with_model(
                folder, model_class=auto_class, workarounds=workarounds, trust_remote_code=trust_remote_code
            )
        else:
            model, early = load_unaudited(
                auto_class, folder, poison=True, workarounds=workarounds, trust_remote_code=trust_remote_code
            )
    if weightless:
        needed = tuple(o.name for o in report.workarounds if o.status == WorkaroundStatus.APPLIED)
    else:
        report, _ = _audit.audit_after_load(model, registry.resolve(workarounds), folder, early=early)
        needed = tuple(o.name for o in early if o.status == WorkaroundStatus.APPLIED)
        if not report.ok:  # a wrong tensor the model's first forward pass rebuilds before reading it is said to be so
            report = rebuilt(model, report)
    ran = {name for name, module in model.named_modules() if id(module) in called} if called.observed else None
    seconds["scan" if weightless else "audit"] = time.perf_counter() - start
    findings = tuple(report.failures)
    plan = plan_fix(model, report, folder, list(needed), ran)
    # a load that is right can still break when the model runs (v4 code in forward or generate): that is a change too,
    # once the model is seen to break (the files calling what this transformers lacks is not enough to call it broken)
    late = needed_past_the_load(plan, needed, model)
    checked = (
        f"its {'load as a scan predicts it' if weightless else 'load'} was audited (every tensor against its code and "
        "checkpoint); its forward and generate were not run (`loadguard audit --forward` runs them)"
    )
    if late and not findings and not needed:
        if not breaks_when_run(model, folder, weightless, late):
            late = []
            checked = (
                f"its {'load as a scan predicts it' if weightless else 'load'} was audited, and one forward pass and "
                "8 greedy tokens on inputs built from its config ran without a failure"
            )
    result = FixResult(  # what every outcome shares; each one below replaces what it knows
        model=label,
        out=None,
        status=FixStatus.CLEAN,
        findings=findings,
        workarounds=needed,
        changes=(),
        refused=(),
        proofs=(),
        diff="",
        versions=dict(report.versions),
        seconds=seconds,
        weightless=weightless,
        auto_class=str(getattr(type(model), "_auto_class", None) or ""),
        checked=checked,
    )
    if not findings and not needed and not late:
        return result
    upstream = upstream_patch(model, report)
    if late:  # v4 code past the load: the workarounds its forward or generate needs stand for source edits too
        needed += tuple(late)
        plan = plan_fix(model, report, folder, list(needed), ran)
    class_name = type(model).__name__
    del model
    diff = diff_of(plan.original, plan.files)
    result = dataclasses.replace(
        result,
        status=FixStatus.NOT_FIXED,
        workarounds=needed,
        changes=tuple(plan.changes),
        refused=tuple(plan.refused),
        upstream=upstream,
    )
    if not plan.files:
        return result
    # what needs no model run first: a patch that does not apply, compile or lint as the original did is never written
    start = time.perf_counter()
    checked = static_checks({name: plan.original[name] for name in plan.files}, plan.files, diff)
    seconds["checks"] = time.perf_counter() - start
    if any(proof.ok is False for proof in checked):
        return dataclasses.replace(result, proofs=checked, diff=diff)
    staging, held = stage(folder, target, plan.files, diff, copy_weights)
    staged = digest(staging)  # the proofs run the model's code: what it writes into the copy is never published
    try:
        proofs: tuple[Proof, ...] = checked
        unrun: tuple[str, ...] = ()
        if verify:
            start = time.perf_counter()
            traced = tuple(name for name in plan.files if name.endswith(".py"))
            document = run_patched(staging, auto_class, weightless, prove_outputs, class_name, traced)
            unrun = not_run(diff, plan.files, document.pop("lines_run", {}) or {})
            after = document.pop("outputs", None) or (
                f"the patched copy did not load on {report.versions.get('transformers', '')}"
                if document.get("error")
                else "the patched copy's outputs were not taken (no fork on this platform)"
            )
            current = str(report.versions.get("transformers", ""))
            proofs += (loads_right(document, findings, plan.refused, weightless),)
            seconds["saves"] = float((document.get("saves") or {}).get("seconds") or 0.0)
            proofs += (
                saved(document, current, weightless)
                or Proof(
                    "saves_and_reloads", current, None, "not run: the patched copy did not load", weightless=weightless
                ),
            )
            seconds["prove_current"] = time.perf_counter() - start
            start = time.perf_counter()
            versions = (compat_version,) if compat_version else written_for(folder)
            ids = after.get("ids") if isinstance(after, dict) else None  # the prompt both sides run on
            compat, before = before_v5_on_first(
                versions, folder, staging, needed, class_name, weightless, prove_outputs, ids
            )
            proofs += (compat,)
            seconds["prove_compat"] = time.perf_counter() - start
            if prove_outputs:
                answered = tuple(t for change in plan.changes for t in change.tensors)
                proofs += (same_outputs(before, after, compat.transformers, current, weightless, answered),)
            changed = tampered(staged, digest(staging))
            if changed:
                proofs += (
                    Proof(
                        "copy_untouched",
                        str(report.versions.get("transformers", "")),
                        False,
                        f"the model's code changed the patched copy while it was proven ({', '.join(changed[:8])}"
                        f"{f' and {len(changed) - 8} more' if len(changed) > 8 else ''}): not published",
                    ),
                )
        status = _status(verify, proofs, plan.refused)
        written = status != FixStatus.NOT_FIXED
        result = dataclasses.replace(
            result,
            out=str(target) if written else None,
            status=status,
            proofs=proofs,
            diff=diff,
            weights=held if written else "",
            unrun=unrun,
        )
        if status != FixStatus.NOT_FIXED:
            publish(staging, target, result)
        return result
    finally:
        if staging.exists():
            remove_tree(staging.parent, staging, "the fix being proven")
        _forget_modules(staging.name)


def _forget_modules(staging: str) -> None:
    """The copy of the staged code transformers kept in its modules cache (``transformers_modules/_dot_<out>..._fix_
    <pid>_<rand>``, one per run): removed with the staged copy (proof (b)'s copies are removed on its side)."""
    from transformers.utils import HF_MODULES_CACHE

    modules = Path(HF_MODULES_CACHE, "transformers_modules")
    pattern = cached_module_glob(staging)
    for entry in modules.glob(pattern) if pattern else ():
        try:
            remove_tree(modules, entry, "the fixed copy's modules cache")
        except OSError:
            pass


def _status(verify: bool, proofs: tuple[Proof, ...], refused: list[Refusal]) -> str:
    """``not_fixed`` on a failed proof, ``unverified`` where one could not run; outputs that cannot be compared (the
    original's are NaN, or differ from themselves, or it does not run on either release) leave (a) and (b) to decide."""
    if not verify:
        return FixStatus.UNVERIFIED
    if any(p.ok is False for p in proofs):
        return FixStatus.NOT_FIXED
    if any(p.ok is None and not p.said.startswith("not compared") for p in proofs):
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
    try:  # before any model code runs: a parent that cannot be written in is one line now, not a crash at the end
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".loadguard-probe-", dir=target.parent))
    except OSError as error:
        raise InvalidOptionError(
            f"--out {target}: cannot write in {target.parent} ({error.strerror or error})",
            "pass an --out in a folder you can write to",
        ) from None


__all__ = ["FixResult", "fix"]
