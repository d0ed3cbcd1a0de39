"""``load``: from_pretrained, audit, and apply a policy, in one call."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import Any

from .. import _files, _hf
from .. import workarounds as registry
from .._hf import poison as poison_context
from .._infra import observers
from ..errors import BrokenModelError, InvalidOptionError, LoadguardWarning, fix_command_line
from ..report import AuditReport, RepairResult
from .repairing import repair
from .workaround_audit import audit_after_load

POLICIES = ("repair", "raise", "warn")


def describe_failures(report: AuditReport, limit: int = 8) -> str:
    """One line listing the failing tensors and how each is wrong."""
    failures = report.failures
    listed = ", ".join(f"{f.tensor} ({f.status}{' at ' + f.location if f.location else ''})" for f in failures[:limit])
    more = f" and {len(failures) - limit} more" if len(failures) > limit else ""
    return f"{len(failures)} tensor(s) of {report.model} are not what its code and checkpoint define: {listed}{more}"


def load_unaudited(
    model_class: Any,
    path: str | os.PathLike,
    *,
    poison: bool = False,
    workarounds: Any = (),
    strict_stale: bool = False,
    **from_pretrained_kwargs: Any,
):
    """``from_pretrained`` as a user writes it, after loadguard's pre-flight checks (folder, config, trust,
    checkpoint files) and inside the ``before_import`` workarounds and, if asked, :func:`loadguard.poison`.
    No audit. Returns ``(model, outcomes of the before_import workarounds)``; every failure is a typed
    :class:`loadguard.LoadguardError` naming the registered workarounds that fix it.

    With ``"auto"`` among ``workarounds``, a load that fails with a failure a ``before_import`` workaround
    declares is retried with that workaround (once per newly matched workaround, never silently: each
    outcome says which failure chose it)."""

    # an after_load workaround is stale when its targets come out right: decided on leftover memory, a freed copy of
    # the right table (the reference build's, an earlier load's) would make it look stale; under poison it cannot
    poison = poison or registry.decides_on_memory(workarounds)
    if "dtype" in from_pretrained_kwargs:
        from_pretrained_kwargs["dtype"] = _hf.parse_dtype(from_pretrained_kwargs["dtype"])
    config = _files.read_config(path, bool(from_pretrained_kwargs.get("trust_remote_code", False)))
    _hf.check_checkpoint(path)

    def attempt(active: tuple[str, ...]):
        cls = _hf.resolve_class(model_class, config)  # inside: a workaround may give back an auto class auto_map names
        with poison_context() if poison else contextlib.nullcontext():
            return _hf.from_pretrained(cls, path, active_workarounds=active, **from_pretrained_kwargs)

    model, early = registry.attempt(
        attempt, workarounds, path, {"_name_or_path": str(path), **config}, strict=strict_stale
    )
    registry.remember(model, early)
    return model, list(early)


def load(
    model_class: Any,
    path: str | os.PathLike,
    *,
    on_problem: str = "repair",
    poison: bool = False,
    checkpoint: Any = None,
    workarounds: str | Sequence[str] = (),
    strict_stale: bool = False,
    **from_pretrained_kwargs: Any,
):
    """Load with ``from_pretrained``, audit, and apply ``on_problem``. The model carries its report.

    Args:
        model_class: an auto class or model class (``AutoModelForCausalLM``) or its name as a string.
        path: what ``from_pretrained`` takes.
        on_problem: ``"repair"`` (repair in memory; raise :class:`BrokenModelError` if anything stays
            broken), ``"raise"`` (raise :class:`BrokenModelError` listing the bad tensors) or ``"warn"``
            (issue a :class:`LoadguardWarning` and return the model as loaded).
        poison: load inside :func:`loadguard.poison` so leftover memory is NaN / INT_MAX, never a
            plausible value (slower: every allocation is written). Always on when ``after_load`` workarounds are
            named: whether one is stale must not depend on what memory the load happened to get.
        checkpoint: where to read the checkpoint for the fidelity check (default: ``path`` when local).
        workarounds: names of registered workarounds (``loadguard workarounds list``) to apply; each must
            apply to the model. ``before_import`` ones run around the load, ``after_load`` ones after it
            (skipped as stale when what they fix is already correct). ``"auto"`` (alone or in the list)
            also applies the ``before_import`` workarounds whose declared failure the load hits, and retries;
            the report says which and why.
        strict_stale: a stale workaround raises :class:`loadguard.errors.StaleWorkaroundError`.
        **from_pretrained_kwargs: passed to ``from_pretrained`` (``dtype=``, ``trust_remote_code=``, ...).

    The returned model has ``model.loadguard_report``, which describes the model you hold (after workarounds and
    any repair: ``.method`` says what was repaired, ``.workarounds`` their outcomes), ``model.loadguard_report_as_loaded``
    (what ``from_pretrained`` left, before either) and ``model.loadguard_repair`` (the :class:`RepairResult`, or None).

    Example::

        model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True)
        model.loadguard_report.ok              # True: the model you hold is right (repaired if it had to be)
        model.loadguard_report_as_loaded.ok    # False if from_pretrained left it broken
    """
    if on_problem not in POLICIES:
        raise InvalidOptionError(f"on_problem={on_problem!r} is not a policy", f"use one of: {', '.join(POLICIES)}")

    chosen = registry.resolve(workarounds)
    token = observers.inside_load.set(True)
    try:
        model, early = load_unaudited(
            model_class,
            path,
            poison=poison,
            workarounds=workarounds,
            strict_stale=strict_stale,
            **from_pretrained_kwargs,
        )
    finally:
        observers.inside_load.reset(token)
    as_loaded, after = audit_after_load(model, chosen, checkpoint, early=early, strict=strict_stale)
    report = after or as_loaded
    attach(model, as_loaded, report, None)
    if report.ok or on_problem != "repair":
        observers.notify("load", report=report, repair=None, policy=on_problem, held=model.loadguard_report)
        if report.ok:
            return model
        hint = _hint(report, path, bool(from_pretrained_kwargs.get("trust_remote_code")))
        if on_problem == "raise":
            raise BrokenModelError(report, describe_failures(report), hint)
        warnings.warn(LoadguardWarning(f"{describe_failures(report)}. {hint}"), stacklevel=2)
        return model
    result = repair(model, report)
    attach(model, as_loaded, report, result)
    observers.notify("load", report=report, repair=result, policy=on_problem, held=model.loadguard_report)
    if not result.ok:
        raise BrokenModelError(report, describe_unrepaired(result), UNREPAIRED_HINT)
    return model


def held(report: AuditReport, result: RepairResult | None) -> AuditReport:
    """The report that describes the model as its caller holds it: the re-audit after a repair that worked (its
    ``method`` says what was repaired; the workaround outcomes kept), else ``report``."""
    if result is None or not result.ok:
        return report

    return dataclasses.replace(result.after, workarounds=report.workarounds)


def attach(model, as_loaded: AuditReport, report: AuditReport, result: RepairResult | None) -> None:
    """One rule for :func:`load`, the pytest plugin and its fixtures: ``model.loadguard_report`` describes the model
    the caller holds (:func:`held`); ``model.loadguard_report_as_loaded`` is what ``from_pretrained`` left (before
    workarounds and repair); ``model.loadguard_repair`` the repair (None when none ran)."""
    model.loadguard_report = held(report, result)
    model.loadguard_report_as_loaded = as_loaded
    model.loadguard_repair = result


UNREPAIRED_HINT = "fix the model's _init_weights or its checkpoint"


def describe_unrepaired(result: RepairResult) -> str:
    """One sentence for a repair that left the model broken: what was wrong and what stayed wrong."""
    left = ", ".join(f"{u.tensor}: {u.reason}" for u in result.unrepaired) or describe_failures(result.after)
    return f"{describe_failures(result.before)}; repair left it broken ({left})"


def _hint(report: AuditReport, path: Any = None, trust_remote_code: bool = False) -> str:
    """Repair now, and the lasting fix: the ``loadguard fix`` command that writes the model's ``_init_weights`` change."""
    lasting = (
        f"the lasting fix, for everyone who loads it: {fix_command_line(str(path), trust_remote_code=trust_remote_code)} "
        "(writes the _init_weights branch that rebuilds these tensors, proven)"
        if isinstance(path, (str, os.PathLike))
        else "the lasting fix is an _init_weights branch that rebuilds these tensors (loadguard fix writes it)"
    )
    return f"repair it in memory with loadguard.repair(model, report) (or load(..., on_problem='repair')); {lasting}"
