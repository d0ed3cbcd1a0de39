"""The load hook: every way a test asks transformers for a model or its code, wrapped for the session (installed when
transformers' modules are first imported, so a run that never imports them pays nothing).

A test loads the way its suite's own runner does: ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)``
(any auto class, ``from_pretrained`` or ``from_config``), a model class's own ``from_pretrained`` (one imported from
``transformers_modules`` too), ``AutoConfig`` / ``AutoTokenizer`` / ``AutoProcessor`` / the image, feature and video
processors, or ``get_class_from_dynamic_module`` itself. The auto classes import the model's remote code before
``PreTrainedModel.from_pretrained`` is reached, so each of these entries is wrapped: the outermost one a test calls
runs the test's workarounds around the whole of it (``auto``: retried with those whose failure it hits), and, when it
returns a model, the session's policy after it. The calls nested inside (the auto class's ``AutoConfig``, the model
class's ``from_pretrained``) pass through untouched.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import warnings
from collections.abc import Callable

import pytest

from .. import _audit, _files
from .._infra import AfterImport
from ._state import Session, marker, policy_for, workarounds_for

_ENTERED: contextvars.ContextVar[bool] = contextvars.ContextVar("loadguard_plugin_entered", default=False)
"""Set while a wrapped entry of a test runs: the entries transformers calls inside it pass through."""

_MODELING = "transformers.modeling_utils"
_AUTO_MODELS = "transformers.models.auto.modeling_auto"
_DYNAMIC = "transformers.dynamic_module_utils"
# auto class of what a model folder holds besides the model -> the module transformers defines it in
_AUTO_CODE = {
    "transformers.models.auto.configuration_auto": "AutoConfig",
    "transformers.models.auto.tokenization_auto": "AutoTokenizer",
    "transformers.models.auto.processing_auto": "AutoProcessor",
    "transformers.models.auto.image_processing_auto": "AutoImageProcessor",
    "transformers.models.auto.feature_extraction_auto": "AutoFeatureExtractor",
    "transformers.models.auto.video_processing_auto": "AutoVideoProcessor",
}
TARGETS = frozenset({_MODELING, _AUTO_MODELS, _DYNAMIC, *_AUTO_CODE})
"""The modules whose entries the hook wraps, each as soon as it is imported."""


def install(session: Session) -> None:
    """Wrap the load entries for the session (once): those of transformers' modules imported already now, the others
    when they are first imported."""
    if session.installed:
        return
    session.installed = True
    done: set[str] = set()

    def patch(module) -> None:
        if module.__name__ in done:
            return
        done.add(module.__name__)
        _PATCHERS.get(module.__name__, _patch_auto_code)(session, module)

    for name in sorted(TARGETS):
        if name in sys.modules:
            patch(sys.modules[name])
    if done == TARGETS:
        return
    hook = AfterImport(lambda name: name in TARGETS and name not in done, patch).install()
    session.undo.append(hook.remove)


def _path_argument(args: tuple, kwargs: dict, position: int = 1):
    return args[position] if len(args) > position else kwargs.get("pretrained_model_name_or_path")


def _config_path(args: tuple, kwargs: dict):
    """Where the model a ``from_config(config)`` builds keeps its code: the folder the config was read from."""
    config = args[1] if len(args) > 1 else kwargs.get("config")
    return getattr(config, "_name_or_path", None) or None


def _entry(session: Session, function: Callable, where: Callable, loads: bool, direct: bool = False) -> Callable:
    """``function`` wrapped: called by a test (and not inside another wrapped entry, nor inside ``loadguard.load``),
    it runs with the test's workarounds and, when it ``loads`` a model, under the session's policy."""

    @functools.wraps(function)
    def entry(*args, **kwargs):
        from .._infra import observers

        item = session.current
        if item is None or _ENTERED.get() or observers.inside_load.get():
            return function(*args, **kwargs)  # outside tests, nested, or loadguard.load auditing itself: untouched
        token = _ENTERED.set(True)
        try:
            path = where(args, kwargs)
            if loads:
                return _load(session, item, _through_the_base if direct else function, args, kwargs, path)
            return _code(session, item, function, args, kwargs, path)
        finally:
            _ENTERED.reset(token)

    return entry


def _through_the_base(*args, **kwargs):
    """A model class's own ``from_pretrained`` (the test called it, or a class's override delegated to it), entered
    through what :func:`loadguard._hf.through_the_base` put in its place, so that this is the call it records."""
    from transformers import PreTrainedModel

    return PreTrainedModel.__dict__["from_pretrained"].__func__(*args, **kwargs)


def _wrap_classmethod(session: Session, owner: type, name: str, where: Callable, loads: bool, direct=False) -> None:
    original = owner.__dict__.get(name)
    if not isinstance(original, classmethod):
        return
    setattr(owner, name, classmethod(_entry(session, original.__func__, where, loads, direct)))
    session.undo.append(lambda: setattr(owner, name, original))


def _patch_pretrained_model(session: Session, module) -> None:
    _wrap_classmethod(session, module.PreTrainedModel, "from_pretrained", _path_argument, loads=True, direct=True)


def _patch_auto_models(session: Session, module) -> None:
    """Every auto model class: transformers gives each one a ``from_pretrained`` / ``from_config`` of its own."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    classes, seen = list(_BaseAutoModelClass.__subclasses__()), set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes.extend(cls.__subclasses__())
        _wrap_classmethod(session, cls, "from_pretrained", _path_argument, loads=True)
        _wrap_classmethod(session, cls, "from_config", _config_path, loads=False)


def _patch_dynamic_modules(session: Session, module) -> None:
    """``get_class_from_dynamic_module`` as a test imports it (transformers' own modules hold their own reference)."""
    original = module.get_class_from_dynamic_module
    module.get_class_from_dynamic_module = _entry(session, original, _path_argument, loads=False)
    session.undo.append(lambda: setattr(module, "get_class_from_dynamic_module", original))


def _patch_auto_code(session: Session, module) -> None:
    cls = getattr(module, _AUTO_CODE[module.__name__], None)
    if cls is not None:
        _wrap_classmethod(session, cls, "from_pretrained", _path_argument, loads=False)


_PATCHERS = {_MODELING: _patch_pretrained_model, _AUTO_MODELS: _patch_auto_models, _DYNAMIC: _patch_dynamic_modules}


def _code(session: Session, item, function: Callable, args: tuple, kwargs: dict, path):
    """An entry that imports or builds the model's code without loading weights: the test's workarounds around it."""
    from .. import workarounds as registry

    selection = workarounds_for(item, session)
    try:
        if not registry.names_of(selection):
            return function(*args, **kwargs)
        result, _ = registry.attempt(
            lambda active: function(*args, **kwargs),
            selection,
            path,
            _config_of(path),
            strict=bool(marker(item).get("strict_stale", False)),
        )
    except Exception as error:
        _name_workarounds(error, selection)
        raise
    return result


def _load(session: Session, item, call: Callable, args: tuple, kwargs: dict, path):
    """An entry that returns a loaded model: the test's workarounds around all of it, then the policy on the model."""
    from .. import _hf
    from .. import workarounds as registry
    from .._hf import loading_info

    policy = policy_for(item, session)
    selection = workarounds_for(item, session)
    base = _hf.BaseCall()
    poisoned = session.poisons(policy) or registry.decides_on_memory(selection)

    def attempt(active):
        # transformers' own loading info is the evidence of what was not loaded on purpose: the outermost
        # PreTrainedModel.from_pretrained is always asked for it and hands back what its caller asked for
        with _hf.poison() if poisoned else contextlib.nullcontext(), _hf.through_the_base(base):
            return call(*args, **kwargs)

    try:
        result, early = registry.attempt(
            attempt, selection, path, _config_of(path), strict=bool(marker(item).get("strict_stale", False))
        )
    except Exception as error:
        _name_workarounds(error, selection)
        raise
    import torch

    model, info = (base.model, base.info) if base.reached else loading_info.split(result)
    if not isinstance(model, torch.nn.Module):  # a custom class's return with no model in it: nothing to audit
        return result
    loading_info.remember(model, info)
    registry.remember(model, early)
    if policy != "off" or session.poison:
        trusted = bool(kwargs.get("trust_remote_code"))
        _audit_load(
            model,
            policy,
            item,
            selection,
            early,
            reproducer_command(path, kwargs, selection, session.poisons(policy)),
            fix_command(path, trusted),
        )
        if session.forward and policy != "off":
            _run_once(model, policy)
    return result


def _config_of(path) -> dict:
    """The config.json of a local model folder (for the workarounds' applies_to), else just its name."""

    return {"_name_or_path": str(path), **(_files.local_config(path) or {})}


NOTED = "loadguard_noted"
"""Set on an exception the plugin has looked at for workarounds that fix it: it is named once, where it was raised."""


def _name_workarounds(error: BaseException, selection) -> None:
    """A load that failed the way registered workarounds fix: say which, and the marker that applies them here."""
    from .. import workarounds as registry
    from ..errors import LoadguardError, fixes_hint

    with contextlib.suppress(AttributeError, TypeError):
        setattr(error, NOTED, True)
    try:
        active = {w.name for w in registry.resolve(selection)}
    except LoadguardError:
        active = set()
    names = [n for n in registry.fixes_for(error) if n not in active]
    if not names:
        return
    if isinstance(error, LoadguardError):
        error.fixes = tuple(names)
    error.add_note(f"loadguard: {fixes_hint(names, 'pytest')}")


def note_on_failure(error: BaseException, item) -> None:
    """A test that failed outside any load the hook wrapped (``--loadguard=off`` with no marker installs nothing): when
    the failure is one registered workarounds fix, say which and the marker that applies them. Costs nothing on a test
    that passes, and on one that never imported transformers."""
    if getattr(error, NOTED, False) or "transformers" not in sys.modules:
        return
    from ..errors import LoadguardError

    try:
        selection = marker(item).get("workarounds", ())
        _name_workarounds(error, selection)
    except LoadguardError:  # the marker itself is wrong: the setup check says so
        pass


def reproducer_command(path, kwargs: dict, selection, poisoned: bool) -> str:
    """The ``loadguard audit`` command that loads this model as the test did (empty when the load named no path)."""
    if not isinstance(path, (str, os.PathLike)):
        return ""
    from .. import workarounds as registry
    from ..errors import command_line

    return command_line(
        "audit",
        str(path),
        trust_remote_code=bool(kwargs.get("trust_remote_code")),
        workarounds=[str(n) for n in registry.names_of(selection)],
        extra=() if poisoned else ("--no-poison",),
    )


def fix_command(path, trust_remote_code: bool) -> str:
    """The ``loadguard fix`` command that writes the lasting change for the model's author (empty without a path)."""
    if not isinstance(path, (str, os.PathLike)):
        return ""
    from ..errors import fix_command_line

    return fix_command_line(str(path), trust_remote_code=trust_remote_code)


def _audit_load(model, policy: str, item, selection, early=(), reproduce: str = "", lasting: str = "") -> None:
    from .. import workarounds as registry
    from .._audit import attach, describe_failures, repair
    from .._infra import observers

    settings = marker(item)
    chosen = [w for w in registry.resolve(selection) if w.stage == "after_load"]
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

        hint = UNREPAIRED_HINT + (f"\nLasting fix, for everyone who loads it: {lasting}" if lasting else "")
        pytest.fail(f"loadguard: {describe_unrepaired(result)}\nHint: {hint}", pytrace=False)
    if report.ok or policy in ("off", "repair"):
        return
    message = describe_failures(report)
    hint = "repair it in memory for this run (--loadguard=repair, or loadguard.load(..., on_problem='repair'))"
    hint += (
        f"\nLasting fix, for everyone who loads it: {lasting} (writes the model's _init_weights change, proven)"
        if lasting
        else "; the lasting fix is an _init_weights branch that rebuilds these tensors (loadguard fix writes it)"
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


__all__ = ["TARGETS", "fix_command", "install", "note_on_failure", "reproducer_command"]
