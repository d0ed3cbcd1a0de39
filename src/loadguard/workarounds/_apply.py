"""Applying workarounds around loads: ``attempt`` (with ``auto``), ``before_import``, ``using``, the model-level
``construction``, ``predict_after_load`` (a scan's view) and ``for_runner``. What a workaround is, and the registry, are
in :mod:`loadguard.workarounds._registry`; running the ``after_load`` ones, whose staleness an audit of the model
decides, is the audit's (``loadguard._audit``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._files import config_dict, folder_of, local_config
from ..errors import StaleWorkaroundError, WorkaroundError
from ..report import WorkaroundStatus
from ._registry import (
    CONSTRUCTION_ATTRIBUTE,
    Workaround,
    WorkaroundOutcome,
    activate,
    fixes_for,
    get,
    model_code,
    resolve,
    wants_auto,
)


def _versions() -> str:
    import transformers

    return f"transformers {transformers.__version__}"


def model_label(config: dict) -> str:
    kinds = [config.get("model_type") or "?"] + list(config.get("architectures") or [])
    return f"{config.get('_name_or_path') or 'the model'} ({', '.join(kinds)})"


def check_applies(item: Workaround, config: dict) -> None:
    if not item.applies(config):
        raise WorkaroundError(
            f"workaround {item.name} does not apply to {model_label(config)}: it is for {item.applies_to_text}",
            "remove it from the workarounds of this model",
        )


def stale(item: Workaround, what: str, strict: bool) -> WorkaroundOutcome:
    detail = f"{_versions()} {what}; remove workaround {item.name}, upstream {item.upstream}"
    if strict:
        raise StaleWorkaroundError(
            f"stale workaround: {detail}", "delete the workaround (strict mode treats a stale workaround as an error)"
        )
    return WorkaroundOutcome(item.name, item.stage, WorkaroundStatus.STALE, 0, detail, item.upstream)


@contextlib.contextmanager
def before_import(
    items: Sequence[Workaround],
    path: Any,
    config: dict,
    *,
    strict: bool = False,
    auto: dict[str, str] | None = None,
    check: bool = True,
) -> Iterator[list[WorkaroundOutcome]]:
    """Run the ``before_import`` workarounds around a load; the yielded list holds their outcomes after.

    The model's remote code is imported afresh inside (transformers caches imported remote modules per
    process; an import that once succeeded with a workaround would otherwise never be retried without it, nor
    show whether the workaround was needed). ``auto`` maps the names chosen by ``workarounds="auto"`` to the
    failure that chose them.
    """
    chosen = [w for w in items if w.stage == "before_import"]
    for item in chosen if check else ():
        check_applies(item, config)
    outcomes: list[WorkaroundOutcome] = []
    if chosen and path is not None:
        forget_remote_code(path)
    try:
        with contextlib.ExitStack() as stack:
            usages = [(item, stack.enter_context(item.fn(path, config))) for item in chosen]
            yield outcomes
    finally:
        if chosen and path is not None:
            forget_remote_code(path)
    auto = auto or {}
    for item, usage in usages:
        why = auto.get(item.name, "")
        if usage.count:
            outcomes.append(
                WorkaroundOutcome(
                    item.name, item.stage, WorkaroundStatus.APPLIED, usage.count, usage.detail, item.upstream, why
                )
            )
        else:
            outcomes.append(dataclasses.replace(_unused(item, path, config, strict), auto=why))


def judge_before_import(item: Workaround, sources: list[str]) -> str:
    """Without loading: whether a ``before_import`` workaround is needed, stale or not applicable for a model whose
    code is ``sources`` (from what it declares: ``native``, ``touches``)."""
    native = item.is_native()
    if native is None or item.touches is None:
        return "applies (before import: load with --workaround auto to see whether it is needed)"
    if not item.touches(sources):
        return "not applicable: the model's code does not use what it gives back"
    if native:
        return f"stale: {_versions()} provides what it gives back"
    return f"needed: the model's code uses what {_versions()} lacks"


def _unused(item: Workaround, path: Any, config: dict, strict: bool) -> WorkaroundOutcome:
    """The outcome of a ``before_import`` workaround that changed nothing during a load: ``stale`` when the model's
    code uses what it gives back and the running versions have that again; ``not_applicable`` when the model
    never hits it. A workaround that declares neither (``native``, ``touches``) is ``stale``, as it cannot tell."""
    native = item.is_native()
    if native is None or item.touches is None:
        return stale(item, f"loads {model_label(config)} without it", strict)
    if native and item.touches(model_code(path)):
        return stale(item, f"provides what it gives back, which {model_label(config)} uses", strict)
    why = "its code does not use what it gives back" if native else "its load never reached what it gives back"
    return WorkaroundOutcome(
        item.name,
        item.stage,
        WorkaroundStatus.NOT_APPLICABLE,
        0,
        f"not applicable to {model_label(config)}: {why}",
        item.upstream,
    )


def _describe(error: BaseException) -> str:
    return (
        getattr(error, "message", None)
        or f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    )


def attempt(
    load: Callable[[tuple[str, ...]], Any], selection: Any, path: Any, config: dict, *, strict: bool = False
) -> tuple[Any, list[WorkaroundOutcome]]:
    """``load(active workaround names)`` inside the selection's ``before_import`` workarounds.

    With ``auto`` in the selection, a failure that registered ``before_import`` workarounds declare (and that
    apply to the model) is retried with them, once per newly matched workaround; each outcome records the
    failure that chose it. Returns ``(what load returned, outcomes)``; the last failure propagates."""
    chosen = [w for w in resolve(selection) if w.stage == "before_import"]
    auto = wants_auto(selection)
    reasons: dict[str, str] = {}
    while True:
        named = {w.name for w in chosen}
        active = chosen + [get(name) for name in reasons if name not in named]
        active_names = tuple(w.name for w in active)
        try:
            with before_import(active, path, config, strict=strict, auto=reasons) as early:
                result = load(active_names)
        except Exception as error:
            new = [name for name in fixes_for(error) if name not in active_names and get(name).applies(config)]
            if not auto or not new:
                raise
            for name in new:
                reasons[name] = f"auto: the load failed with {_describe(error)}"
            continue
        return result, list(early)


@contextlib.contextmanager
def using(
    selection: str | Sequence[str | Workaround], path: Any = None, *, strict: bool = False
) -> Iterator[list[WorkaroundOutcome]]:
    """The named ``before_import`` workarounds around your own ``from_pretrained`` (or construction) of the
    model in ``path``; the yielded list holds their outcomes afterwards.

    Example::

        with loadguard.workarounds.using(["v4-attn-mask-utils"], path) as outcomes:
            model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
    """
    config = local_config(path) or {}
    items = [w for w in resolve(selection) if w.stage == "before_import"]
    # with no model folder to read, what applies cannot be told: the caller asked for these by name
    with before_import(
        items, path, {"_name_or_path": str(path), **config}, strict=strict, check=bool(config)
    ) as outcomes:
        yield outcomes


def remember(model: Any, outcomes: Sequence[WorkaroundOutcome]) -> None:
    """Record on ``model`` which ``before_import`` workarounds its load applied."""
    names = tuple(o.name for o in outcomes if o.stage == "before_import" and o.status == WorkaroundStatus.APPLIED)
    try:
        object.__setattr__(model, CONSTRUCTION_ATTRIBUTE, names)
    except (AttributeError, TypeError):  # not a plain object: nothing to remember on
        pass


@contextlib.contextmanager
def construction(model_or_names: Any, config: dict | None = None, path: Any = None) -> Iterator[None]:
    """The ``before_import`` workarounds a model's load applied (or those named), active again with their
    outcomes discarded: for building the model's class once more (its reference, its eager twin, a scan).

    ``path`` (default: the model's folder, when its ``name_or_path`` is one) is where they look at the
    model's files; ``config`` (default: its config.json there, over ``model.config``) what they read."""
    names = (
        model_or_names
        if isinstance(model_or_names, (list, tuple))
        else getattr(model_or_names, CONSTRUCTION_ATTRIBUTE, ())
    )
    if not names:
        yield
        return
    model_config = getattr(model_or_names, "config", None)
    if path is None and model_config is not None:
        path = folder_of(model_config)
    if config is None:
        config = {**config_dict(model_config), **(local_config(path) or {})}
    with activate(names, path, config):
        yield


def config_of(model: Any) -> dict:
    return config_dict(getattr(model, "config", None))


def targets_of(item: Workaround, model: Any, config: dict) -> list[str]:
    """What an ``after_load`` workaround targets in ``model``; an error when it does not apply or finds nothing."""
    check_applies(item, config)
    targets = item.targets(model)
    if not targets:
        raise WorkaroundError(
            f"workaround {item.name} found nothing to fix in {model_label(config)}: none of the modules it targets exist",
            "the model changed: check whether the workaround still applies, then remove or update it",
        )
    return targets


def predict_after_load(
    model: Any, items: Sequence[Workaround], report: Any, *, strict: bool = False
) -> list[WorkaroundOutcome]:
    """A scan's view of the ``after_load`` workarounds: ``needed`` where a target is predicted broken, ``stale``
    where every target is predicted correct. Nothing is applied (there are no weights to apply them to)."""
    outcomes = []
    config = config_of(model)
    for item in (w for w in items if w.stage == "after_load"):
        targets = targets_of(item, model, config)
        broken = sorted({f.tensor for f in report.failures} & set(targets))
        if broken:
            outcomes.append(
                WorkaroundOutcome(
                    item.name,
                    item.stage,
                    WorkaroundStatus.NEEDED,
                    0,
                    f"predicted broken: {', '.join(broken)}",
                    item.upstream,
                )
            )
        else:
            outcomes.append(stale(item, f"preserves {', '.join(targets)} (predicted)", strict))
    return outcomes


def for_runner(
    runner: Any, items: Sequence[Workaround], *, strict: bool = False, automatic: Sequence[Workaround] = ()
) -> list[WorkaroundOutcome]:
    """Apply the ``runner`` workarounds named in ``items`` (they must apply) and those in ``automatic``
    that apply to the runner's model (engine suites patch their reference runner per model)."""
    config = config_of(runner.model)
    outcomes = []
    named = [w for w in items if w.stage == "runner"]
    for item in named:
        check_applies(item, config)
    extra = [w for w in automatic if w.stage == "runner" and w not in named and w.applies(config)]
    for item in named + extra:
        if item.needed is not None and not item.needed(runner):
            outcomes.append(stale(item, f"generates with {model_label(config)} without it", strict and item in named))
            continue
        result = item.fn(runner)
        if result is not runner:
            raise WorkaroundError(
                f"runner workaround {item.name} must return the runner it was given",
                "return the runner from the patch",
            )
        outcomes.append(
            WorkaroundOutcome(
                item.name,
                item.stage,
                WorkaroundStatus.APPLIED,
                1,
                "patched the runner" + (" (applies to this model)" if item in extra else ""),
                item.upstream,
            )
        )
    return outcomes


def _sanitize(component: str) -> str:
    """How transformers names a model folder inside ``transformers_modules``."""
    name = component.replace(".", "_dot_").replace("-", "_hyphen_")
    return "_" + name if name[:1].isdigit() else name


def forget_remote_code(path: str | os.PathLike) -> int:
    """Drop the model's remote-code modules that transformers imported in this process (it caches them by
    content), so the next load imports them afresh. Returns how many were dropped."""
    text = str(path).rstrip("/")
    stems = {_sanitize(os.path.basename(os.path.normpath(text)))} | {
        _sanitize(part) for part in text.split("/")[-2:] if part
    }
    dropped = 0
    for name in [n for n in sys.modules if n.startswith("transformers_modules.")]:
        if set(name.split(".")[1:]) & stems:
            del sys.modules[name]
            dropped += 1
    return dropped


__all__ = [
    "attempt",
    "before_import",
    "check_applies",
    "config_of",
    "construction",
    "for_runner",
    "forget_remote_code",
    "judge_before_import",
    "model_label",
    "predict_after_load",
    "remember",
    "stale",
    "targets_of",
    "using",
]
