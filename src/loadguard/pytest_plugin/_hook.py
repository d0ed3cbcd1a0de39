"""The load hook: ``PreTrainedModel.from_pretrained`` wrapped for the session (installed when transformers is first
imported, so a run that never imports it pays nothing), running the marker's workarounds around each load and the
session's policy after it."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings

import pytest

from .. import _audit, _files
from .._infra import AfterImport
from ._state import Session, marker, policy_for

_MODELING = "transformers.modeling_utils"


def install(session: Session) -> None:
    """Wrap ``from_pretrained`` for the session (once), now or when transformers is first imported."""
    if session.installed:
        return
    session.installed = True
    module = sys.modules.get(_MODELING)
    if module is not None:
        _patch_from_pretrained(session, module.PreTrainedModel)
        return
    hook = AfterImport(
        lambda name: name == _MODELING, lambda module: _patch_from_pretrained(session, module.PreTrainedModel)
    ).install()
    session.undo.append(hook.remove)


def _patch_from_pretrained(session: Session, PreTrainedModel) -> None:
    original = PreTrainedModel.__dict__["from_pretrained"]
    function = original.__func__

    @functools.wraps(function)
    def from_pretrained(cls, *args, **kwargs):
        from .._infra import observers

        item = session.current
        if observers.inside_load.get() or item is None:
            return function(cls, *args, **kwargs)  # loadguard.load audits itself; outside tests: untouched
        from .. import workarounds as registry
        from .._hf import loading_info

        policy = policy_for(item, session)
        selection = marker(item).get("workarounds", ())
        path = args[0] if args else kwargs.get("pretrained_model_name_or_path")

        def attempt(active):
            from .._hf import poison

            # transformers' own loading info is the evidence of what was not loaded on purpose: always asked for,
            # handed back only to a caller who asked (any return shape: the model is found in it)
            with (
                poison()
                if session.poisons(policy) or registry.decides_on_memory(selection)
                else contextlib.nullcontext()
            ):
                return function(cls, *args, **{**kwargs, "output_loading_info": True})

        try:
            result, early = registry.attempt(
                attempt, selection, path, _config_of(path), strict=bool(marker(item).get("strict_stale", False))
            )
        except Exception as error:
            _name_workarounds(error, selection)
            raise
        import torch

        model, info = loading_info.split(result)
        if not isinstance(model, torch.nn.Module):  # a custom class's return with no model in it: nothing to audit
            return result
        loading_info.remember(model, info)
        registry.remember(model, early)
        if policy != "off" or session.poison:
            _audit_load(
                model, policy, item, early, reproducer_command(path, kwargs, selection, session.poisons(policy))
            )
            if session.forward and policy != "off":
                _run_once(model, policy)
        return result if kwargs.get("output_loading_info") else model

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)

    def undo():
        PreTrainedModel.from_pretrained = original

    session.undo.append(undo)


def _config_of(path) -> dict:
    """The config.json of a local model folder (for the workarounds' applies_to), else just its name."""

    return {"_name_or_path": str(path), **(_files.local_config(path) or {})}


def _name_workarounds(error: BaseException, selection) -> None:
    """A load that failed the way registered workarounds fix: say which, and how to apply them here."""
    from .. import workarounds as registry
    from ..errors import LoadguardError, fixes_hint

    active = {w.name for w in registry.resolve(selection)}
    names = [n for n in registry.fixes_for(error) if n not in active]
    if not names:
        return
    if isinstance(error, LoadguardError):
        error.fixes = tuple(names)
    error.add_note(f"loadguard: {fixes_hint(names, 'pytest')}")


def reproducer_command(path, kwargs: dict, selection, poisoned: bool) -> str:
    """The ``loadguard audit`` command that loads this model as the test did (empty when the load named no path)."""
    if not isinstance(path, (str, os.PathLike)):
        return ""
    from ..errors import command_line

    names = [selection] if isinstance(selection, str) else list(selection or ())
    return command_line(
        "audit",
        str(path),
        trust_remote_code=bool(kwargs.get("trust_remote_code")),
        workarounds=names,
        extra=() if poisoned else ("--no-poison",),
    )


def _audit_load(model, policy: str, item, early=(), reproduce: str = "") -> None:
    from .. import workarounds as registry
    from .._audit import attach, describe_failures, repair
    from .._infra import observers

    settings = marker(item)
    chosen = [w for w in registry.resolve(settings.get("workarounds", ())) if w.stage == "after_load"]
    as_loaded, after = _audit.audit_after_load(
        model, chosen, early=early, strict=bool(settings.get("strict_stale", False))
    )
    report = after or as_loaded
    result = repair(model, report) if not report.ok and policy == "repair" else None
    attach(
        model, as_loaded, report, result
    )  # the same rule as loadguard.load: the report describes the model as the test gets it
    observers.notify("load", report=report, repair=result, policy=policy, held=model.loadguard_report)
    if result is not None and not result.ok:  # never let a test compare against a model that is still broken
        from .._audit import UNREPAIRED_HINT, describe_unrepaired

        pytest.fail(f"loadguard: {describe_unrepaired(result)}\nHint: {UNREPAIRED_HINT}", pytrace=False)
    if report.ok or policy in ("off", "repair"):
        return
    message = describe_failures(report)
    hint = (
        "repair it (--loadguard=repair, or loadguard.load(..., on_problem='repair')), or fix the model's _init_weights "
        "so it rebuilds these tensors (loadguard fix writes that change)"
    )
    hint += f"\nReproduce: {reproduce}" if reproduce else ""
    if policy == "warn":
        from ..errors import LoadguardWarning

        warnings.warn(LoadguardWarning(f"{message}. {hint}"), stacklevel=3)
        return
    pytest.fail(f"loadguard: {message}\nHint: {hint}", pytrace=False)


def _run_once(model, policy: str) -> None:
    """``--loadguard-forward``: the model the test got, run once; a crash is added to its report and fails the test
    (warns under ``warn``) with the model's line and the API it called."""
    from ..report import Check
    from ..runner import check_run

    report = check_run(model, model.loadguard_report, how="pytest")
    model.loadguard_report = report
    crashes = [f for f in report.findings if f.check == Check.RUNS and f.failing]
    if not crashes:
        return
    message = "; ".join(f"{f.tensor} of {report.model}: {f.detail}" for f in crashes)
    if policy == "warn":
        from ..errors import LoadguardWarning

        warnings.warn(LoadguardWarning(f"loadguard: {message}"), stacklevel=3)
        return
    pytest.fail(f"loadguard: {message}", pytrace=False)


__all__ = ["install"]
