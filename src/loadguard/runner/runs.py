"""``audit --forward``: after the load checks, the loaded model is run: one forward pass and a short greedy generation
on inputs built from its config (no tokenizer). A crash is a finding with the model's line that raised and the API it
called, worded as a load-time crash is; a tensor the audit found wrong that the run rebuilds before using it is said to
be so, instead of overstating what it does to the outputs.

Example::

    report = loadguard.audit(model)
    report = check_run(model, report)   # + a "runs" check: crashed, or the outputs it gave
"""

from __future__ import annotations

import dataclasses

import torch

from .. import _audit
from .. import workarounds as registry
from .._hf import describe_crash, model_outputs
from ..report import AuditReport, Check, CheckSummary, Finding, Status, WorkaroundStatus

REBUILT = "wrong after load, rebuilt before use"


def check_run(model, report: AuditReport, how: str = "api") -> AuditReport:
    """``report`` with the ``runs`` check added: a ``crashed`` finding for a forward or generate that raised (which
    workaround gives back what it called), the check not run (and why) when the forward's inputs cannot be built, and
    each failing finding whose tensor the run rebuilt before its first use marked :data:`REBUILT`. ``how``: whom the
    hint of a workaround addresses (``api``, ``cli``, ``pytest``)."""
    before = _snapshot(model, report)
    seen = model_outputs(model, fixes=registry.fixes_for)
    findings = list(report.findings)
    if seen["missing"]:
        summary = CheckSummary(
            Check.RUNS, False, reason=f"its forward requires {', '.join(seen['missing'])}: not built from the config"
        )
        return dataclasses.replace(report, checks=(*report.checks, summary))
    part = f" (its sub-model {seen['part']}: the whole model's forward requires {', '.join(seen['whole_missing'])})"
    where = part if seen["part"] else ""
    crash = seen["error"]
    if crash:
        fixes = [name for name in crash.get("fixes", []) if name not in _applied(report)]
        hint = f"; code written for transformers 4 calls what this one removed: {_GIVE[how](fixes)}" if fixes else ""
        cause = (
            f"; tensors above are wrong as loaded, and the crash may be theirs: {_REPAIRED[how]}"
            if report.failures
            else ""
        )
        findings.append(
            Finding(
                crash["stage"],
                "call",
                Check.RUNS,
                Status.CRASHED,
                "",
                (),
                "",
                f"{describe_crash({**crash, 'fixes': []})}{where}{hint}{cause}",
                location=crash.get("line") or None,
            )
        )
    else:
        findings = list(_annotate(model, report, before, seen).findings)
    ran = 1 + (seen["tokens"] is not None or bool(crash and crash["stage"] == "generate"))
    summary = CheckSummary(Check.RUNS, True, checked=ran, failed=int(bool(crash)), reason=_said(seen) + where)
    return dataclasses.replace(report, findings=tuple(findings), checks=(*report.checks, summary))


_GIVE = {  # workarounds="auto" answers only failures met while loading: these are named
    "cli": lambda names: (
        f"run again with {' '.join(f'--workaround {name}' for name in names)}, or take `loadguard fix`"
    ),
    "pytest": lambda names: f"mark the test @pytest.mark.loadguard(workarounds={names!r}), or take `loadguard fix`",
    "api": lambda names: f"pass workarounds={names!r}, or take loadguard.fix",
}
_REPAIRED = {
    "cli": "run it repaired (--repair --forward)",
    "pytest": "run it repaired (--loadguard=repair)",
    "api": "run it repaired (loadguard.repair(model, report), then check_run)",
}


def _applied(report: AuditReport) -> set[str]:
    return {o.name for o in report.workarounds if getattr(o, "status", None) == WorkaroundStatus.APPLIED}


def _said(seen: dict) -> str:
    tokens = (
        f"{len(seen['tokens'])} greedy tokens" if seen["tokens"] is not None else f"no generate ({seen['generate']})"
    )
    return f"a forward pass on {', '.join(seen['inputs'])} built from the config, then {tokens}"


def rebuilt(model, report: AuditReport) -> AuditReport:
    """``report`` with each failing finding whose tensor a forward pass of the model rebuilt: :data:`REBUILT` when the
    pass's outputs equal a second pass's on the rebuilt tensor (the wrong value never reached an output, as a rotary
    cache whose length starts unset), else "used" (it did). Only tensors the pass changed are audited again."""
    before = _snapshot(model, report)
    if not before:
        return report
    return _annotate(model, report, before, model_outputs(model, generate=False))


def _tensors(model) -> dict[str, torch.Tensor]:
    return {
        **dict(model.named_parameters(remove_duplicate=False)),
        **dict(model.named_buffers(remove_duplicate=False)),
    }


def _snapshot(model, report: AuditReport) -> dict[str, tuple[int, torch.Tensor]]:
    """The failing tensors as they are now (identity and a copy), before the model runs."""
    named = _tensors(model)
    held = {f.tensor: named[f.tensor] for f in report.failures if isinstance(named.get(f.tensor), torch.Tensor)}
    if any(t.is_meta for t in held.values()):
        return {}
    return {name: (id(t), t.detach().clone()) for name, t in held.items()}


def _annotate(model, report: AuditReport, before: dict, first: dict) -> AuditReport:
    if not before or not isinstance(first["values"], torch.Tensor):
        return report
    now = _tensors(model)
    changed = {
        name
        for name, (identity, value) in before.items()
        if name in now and (id(now[name]) != identity or not _same(now[name], value))
    }
    fixed = changed - {f.tensor for f in _audit.audit(model).failures} if changed else set()
    if not fixed:
        return report
    second = model_outputs(model, generate=False)["values"]
    unused = isinstance(second, torch.Tensor) and torch.equal(first["values"], second)
    note = (
        f"{REBUILT}: the model's code rebuilt it during its first forward pass, whose outputs equal a second pass's"
        if unused
        else "wrong after load and used: the first forward pass rebuilt it after its outputs read the wrong value "
        "(they differ from a second pass's)"
    )
    findings = tuple(
        dataclasses.replace(f, detail=f"{f.detail}; {note}") if f.tensor in fixed else f for f in report.findings
    )
    return dataclasses.replace(report, findings=findings)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    first, second = a.detach().reshape(-1), b.detach().reshape(-1)
    if first.dtype != second.dtype or first.numel() != second.numel():
        return False
    if first.is_floating_point():
        return torch.equal(
            first.view(torch.uint8) if first.numel() else first, second.view(torch.uint8) if second.numel() else second
        )
    return torch.equal(first, second)


__all__ = ["REBUILT", "check_run", "rebuilt"]
