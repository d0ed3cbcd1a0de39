"""Workarounds that prove they are needed, fail loudly when they stop applying, and say when to go.

A workaround is registered with :func:`workaround` and runs at one stage of a load:

- ``before_import``: a context manager active around the whole ``from_pretrained`` (importing the remote
  code, constructing, loading). Called as ``fn(path, config_dict)``; it yields a :class:`Usage` and counts
  what it actually fixed. Counted nothing -> ``stale``.
- ``after_load``: ``fn(model) -> int`` (how many things it fixed). Before it runs, the tensors it targets
  (``targets(model)``) are audited: if they are already correct it is skipped as ``stale`` (a strict mode
  raises instead, like pytest's strict xfail). If it runs and fixes nothing, that is an error.
- ``runner``: ``fn(runner) -> runner``, applied to an :class:`loadguard.runner.HfRunner` after loading;
  ``needed(runner) -> bool`` says whether it still is.

Every application, skip and staleness becomes a :class:`WorkaroundOutcome` in the audit report's JSON
and on the runner.

The generic :func:`loadguard.repair` is the default fix for broken tensors; a named workaround is for
when you want the model's own recompute path, or need a fix before import. Example::

    model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True,
                           workarounds=["minicpmv-pos-cache"], strict_stale=True)
    [w.to_dict() for w in model.loadguard_report.workarounds]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StaleWorkaroundError, WorkaroundError

STAGES = ("before_import", "after_load", "runner")


@dataclass
class Usage:
    """What a ``before_import`` workaround did during one load."""

    count: int = 0
    detail: str = ""


@dataclass(frozen=True)
class Workaround:
    name: str
    stage: str
    fn: Callable[..., Any]
    applies_to: tuple[str, ...] | Callable[[dict], bool]
    reason: str
    upstream: str
    targets: Callable[[Any], list[str]] | None = None
    needed: Callable[[Any], bool] | None = None

    def applies(self, config: dict) -> bool:
        """Whether the workaround is for this model, from its config (as a dict)."""
        if callable(self.applies_to):
            return bool(self.applies_to(config))
        kinds = {config.get("model_type")} | set(config.get("architectures") or [])
        return bool(kinds & set(self.applies_to))

    @property
    def applies_to_text(self) -> str:
        if callable(self.applies_to):
            return (self.applies_to.__doc__ or getattr(self.applies_to, "__name__", "a predicate")).strip()
        return ", ".join(self.applies_to)


@dataclass(frozen=True)
class WorkaroundOutcome:
    """What one workaround did on one load: ``applied`` (with how many things it fixed) or ``stale``."""

    name: str
    stage: str
    status: str  # "applied" | "stale"
    fixed: int = 0
    detail: str = ""
    upstream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "stage": self.stage, "status": self.status, "fixed": self.fixed, "detail": self.detail, "upstream": self.upstream}


REGISTRY: dict[str, Workaround] = {}


def workaround(
    name: str,
    *,
    applies_to: Sequence[str] | Callable[[dict], bool],
    stage: str,
    reason: str,
    upstream: str,
    targets: Callable[[Any], list[str]] | None = None,
    needed: Callable[[Any], bool] | None = None,
):
    """Register the decorated function as workaround ``name`` (see the module docstring for stages).

    ``applies_to``: model types and/or architecture names, or a predicate on the config dict.
    ``upstream``: where the real fix is tracked, ``"<project>#<issue>"``.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, not {stage!r}")
    if stage == "after_load" and targets is None:
        raise ValueError(f"after_load workaround {name!r} needs targets=: the tensors it fixes, for stale detection")

    def register(fn):
        REGISTRY[name] = Workaround(
            name, stage, fn, applies_to if callable(applies_to) else tuple(applies_to), reason, upstream, targets, needed
        )
        return fn

    return register


def get(name: str) -> Workaround:
    _load_builtins()
    try:
        return REGISTRY[name]
    except KeyError:
        raise WorkaroundError(f"there is no workaround called {name!r}", f"known: {', '.join(sorted(REGISTRY))} (`loadguard workarounds list`)") from None


def all_workarounds() -> list[Workaround]:
    _load_builtins()
    return [REGISTRY[n] for n in sorted(REGISTRY)]


def resolve(names: Sequence[str | Workaround]) -> list[Workaround]:
    return [n if isinstance(n, Workaround) else get(n) for n in names]


def _load_builtins() -> None:
    from . import minicpmv, remote_code  # noqa: F401  (registers the built-ins)


def _versions() -> str:
    import transformers

    return f"transformers {transformers.__version__}"


def _model_label(config: dict) -> str:
    kinds = [config.get("model_type") or "?"] + list(config.get("architectures") or [])
    return f"{config.get('_name_or_path') or 'the model'} ({', '.join(kinds)})"


def _check_applies(item: Workaround, config: dict) -> None:
    if not item.applies(config):
        raise WorkaroundError(
            f"workaround {item.name} does not apply to {_model_label(config)}: it is for {item.applies_to_text}",
            "remove it from the workarounds of this model",
        )


def _stale(item: Workaround, what: str, strict: bool) -> WorkaroundOutcome:
    detail = f"{_versions()} {what}; remove workaround {item.name}, upstream {item.upstream}"
    if strict:
        raise StaleWorkaroundError(f"stale workaround: {detail}", "delete the workaround (strict mode treats a stale workaround as an error)")
    return WorkaroundOutcome(item.name, item.stage, "stale", 0, detail, item.upstream)


@contextlib.contextmanager
def before_import(items: Sequence[Workaround], path: Any, config: dict, *, strict: bool = False) -> Iterator[list[WorkaroundOutcome]]:
    """Run the ``before_import`` workarounds around a load; the yielded list holds their outcomes after."""
    chosen = [w for w in items if w.stage == "before_import"]
    for item in chosen:
        _check_applies(item, config)
    outcomes: list[WorkaroundOutcome] = []
    with contextlib.ExitStack() as stack:
        usages = [(item, stack.enter_context(item.fn(path, config))) for item in chosen]
        yield outcomes
    for item, usage in usages:
        if usage.count:
            outcomes.append(WorkaroundOutcome(item.name, item.stage, "applied", usage.count, usage.detail, item.upstream))
        else:
            outcomes.append(_stale(item, f"loads {_model_label(config)} without it", strict))


def after_load(model: Any, items: Sequence[Workaround], report: Any = None, *, strict: bool = False) -> list[WorkaroundOutcome]:
    """Run the ``after_load`` workarounds on ``model``: stale ones are skipped, ones that fix nothing raise.

    ``report`` is the audit of the model as loaded (computed here when not given).
    """
    from ..audit import audit

    outcomes = []
    config = model.config.to_dict()
    for item in (w for w in items if w.stage == "after_load"):
        _check_applies(item, config)
        targets = item.targets(model)
        if not targets:
            raise WorkaroundError(
                f"workaround {item.name} found nothing to fix in {_model_label(config)}: none of the modules it targets exist",
                "the model changed: check whether the workaround still applies, then remove or update it",
            )
        report = report if report is not None else audit(model)
        broken = sorted({f.tensor for f in report.failures} & set(targets))
        if not broken:
            outcomes.append(_stale(item, f"preserves {', '.join(targets)}", strict))
            continue
        fixed = int(item.fn(model))
        if fixed == 0:
            raise WorkaroundError(
                f"workaround {item.name} applied to {_model_label(config)} and fixed nothing (its targets {', '.join(broken)} are broken)",
                "the model's code changed under the workaround: update or remove it",
            )
        outcomes.append(WorkaroundOutcome(item.name, item.stage, "applied", fixed, f"fixed {', '.join(broken)}", item.upstream))
        report = None  # the model changed: a later workaround audits it again
    return outcomes


def audit_after_load(model: Any, items: Sequence[Workaround], checkpoint: Any = None, *, early: Sequence[WorkaroundOutcome] = (), strict: bool = False):
    """Audit ``model`` as loaded, run the ``after_load`` workarounds, and audit again if any applied.

    Returns ``(as_loaded, after)``: both reports carry every outcome (``early`` ones from ``before_import``
    first); ``after`` is None when no workaround changed the model.
    """
    import dataclasses

    from ..audit import audit

    as_loaded = audit(model, checkpoint)
    outcomes = tuple(early) + tuple(after_load(model, items, as_loaded, strict=strict))
    after = audit(model, checkpoint) if any(o.status == "applied" and o.stage == "after_load" for o in outcomes) else None
    as_loaded = dataclasses.replace(as_loaded, workarounds=outcomes)
    return as_loaded, (dataclasses.replace(after, workarounds=outcomes) if after is not None else None)


def for_runner(runner: Any, items: Sequence[Workaround], *, strict: bool = False, automatic: Sequence[Workaround] = ()) -> list[WorkaroundOutcome]:
    """Apply the ``runner`` workarounds named in ``items`` (they must apply) and those in ``automatic``
    that apply to the runner's model (engine suites patch their reference runner per model)."""
    config = runner.model.config.to_dict()
    outcomes = []
    named = [w for w in items if w.stage == "runner"]
    for item in named:
        _check_applies(item, config)
    extra = [w for w in automatic if w.stage == "runner" and w not in named and w.applies(config)]
    for item in named + extra:
        if item.needed is not None and not item.needed(runner):
            outcomes.append(_stale(item, f"generates with {_model_label(config)} without it", strict and item in named))
            continue
        result = item.fn(runner)
        if result is not runner:
            raise WorkaroundError(f"runner workaround {item.name} must return the runner it was given", "return the runner from the patch")
        outcomes.append(WorkaroundOutcome(item.name, item.stage, "applied", 1, "patched the runner" + (" (applies to this model)" if item in extra else ""), item.upstream))
    return outcomes


__all__ = [
    "REGISTRY",
    "STAGES",
    "Usage",
    "Workaround",
    "WorkaroundOutcome",
    "after_load",
    "all_workarounds",
    "audit_after_load",
    "before_import",
    "for_runner",
    "get",
    "resolve",
    "workaround",
]
