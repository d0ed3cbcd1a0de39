"""Workarounds that prove they are needed, fail loudly when they stop applying, and say when to go.

A workaround is registered with :func:`workaround` and runs at one stage of a load:

- ``before_import``: a context manager active around the whole ``from_pretrained`` (importing the remote
  code, constructing, loading) and around every later construction of the model's class (its reference,
  its eager twin, a scan). Called as ``fn(path, config_dict)``; it yields a :class:`Usage` and counts
  what it actually fixed. Counted nothing -> ``stale``. It declares the failures it fixes (``fixes=``:
  exception type and message pattern), so that an error a user hits names the workaround that fixes it,
  and ``workarounds="auto"`` can apply it and retry.
- ``after_load``: ``fn(model) -> int`` (how many things it fixed). Before it runs, the tensors it targets
  (``targets(model)``) are audited: if they are already correct it is skipped as ``stale`` (a strict mode
  raises instead, like pytest's strict xfail). If it runs and fixes nothing, that is an error.
- ``runner``: ``fn(runner) -> runner``, applied to an :class:`loadguard.runner.HfRunner` after loading;
  ``needed(runner) -> bool`` says whether it still is.

Every application, skip and staleness becomes a :class:`WorkaroundOutcome` in the audit report's JSON
and on the runner.

Workarounds come from loadguard itself, from installed packages (entry-point group
``loadguard.workarounds``: importing the named module registers them) and from files
(:func:`load_file`, the CLI's ``--workarounds-from FILE.py``); each remembers where it came from.

The generic :func:`loadguard.repair` is the default fix for broken tensors; a named workaround is for
when you want the model's own recompute path, or need a fix before import. Example::

    model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True,
                           workarounds=["minicpmv-pos-cache"], strict_stale=True)
    [w.to_dict() for w in model.loadguard_report.workarounds]
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidOptionError, StaleWorkaroundError, WorkaroundError

STAGES = ("before_import", "after_load", "runner")
AUTO = "auto"
ENTRY_POINT_GROUP = "loadguard.workarounds"
BUILT_IN = "built-in"


@dataclass
class Usage:
    """What a ``before_import`` workaround did during one load."""

    count: int = 0
    detail: str = ""


@dataclass(frozen=True)
class Signature:
    """A failure a workaround fixes: an exception type (by name, matched along its class hierarchy) whose
    message matches ``pattern`` (a regular expression, searched)."""

    exception: str
    pattern: str

    def matches(self, error: BaseException) -> bool:
        names = {cls.__name__ for cls in type(error).__mro__}
        return self.exception in names and re.search(self.pattern, str(error)) is not None

    def to_dict(self) -> dict[str, str]:
        return {"exception": self.exception, "pattern": self.pattern}


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
    fixes: tuple[Signature, ...] = ()
    source: str = BUILT_IN
    """Where it was registered: ``built-in``, ``entry point NAME (DIST)``, ``file PATH`` or ``module NAME``."""
    native: Callable[[], bool] | None = None
    """``before_import``: whether the running transformers / torch has what the workaround gives back (then it
    does nothing, and is ``stale`` for the models that use that thing)."""
    touches: Callable[[list[str]], bool] | None = None
    """``before_import``: whether a model's code (the sources of its ``*.py`` files) uses what the workaround gives
    back: with ``native``, what tells ``stale`` (this model needed it; this transformers has it again) from
    ``not applicable`` (this model never hits it)."""

    def is_native(self) -> bool | None:
        """Whether the running transformers / torch provides what this workaround gives back (None: not declared)."""
        return bool(self.native()) if self.native is not None else None

    def fixes_error(self, error: BaseException) -> bool:
        """Whether ``error`` (or an exception it was raised from) is one of the failures this workaround fixes."""
        return any(signature.matches(e) for e in _chain(error) for signature in self.fixes)

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
    """What one workaround did on one load: ``applied`` (with how many things it fixed: the model needed it),
    ``stale`` (the model used to need it, and what it fixes is now right without it: remove it) or
    ``not_applicable`` (this model never hits what it fixes); in a scan, an ``after_load`` workaround is
    ``needed`` (its targets are predicted broken) or ``stale``, never applied."""

    name: str
    stage: str
    status: str  # "applied" | "stale" | "not_applicable" | (a scan's after_load) "needed"
    fixed: int = 0
    detail: str = ""
    upstream: str = ""
    auto: str = ""
    """Set when ``workarounds="auto"`` chose it: the failure that made it apply."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage,
            "status": self.status,
            "fixed": self.fixed,
            "detail": self.detail,
            "upstream": self.upstream,
            "auto": self.auto or None,
        }


REGISTRY: dict[str, Workaround] = {}
# Where a registration happening now comes from (set while loadguard imports an entry point or a file).
_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("loadguard_workaround_source", default=None)
_external_errors: dict[str, str] = {}  # entry point -> why it could not be imported
_entry_points_loaded = False


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from or while handling, innermost last."""
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def workaround(
    name: str,
    *,
    applies_to: Sequence[str] | Callable[[dict], bool],
    stage: str,
    reason: str,
    upstream: str,
    targets: Callable[[Any], list[str]] | None = None,
    needed: Callable[[Any], bool] | None = None,
    fixes: Sequence[tuple[str, str] | Signature] = (),
    native: Callable[[], bool] | None = None,
    touches: str | Callable[[list[str]], bool] | None = None,
):
    """Register the decorated function as workaround ``name`` (see the module docstring for stages).

    ``applies_to``: model types and/or architecture names, or a predicate on the config dict.
    ``upstream``: where the real fix is tracked, ``"<project>#<issue>"``.
    ``fixes``: the failures it fixes, as ``(exception type name, message regex)`` pairs: errors that match
    name it in their hint, and ``workarounds="auto"`` applies it when the load fails that way.
    ``native`` (``before_import``): ``() -> bool``, whether the running transformers / torch has what it gives
    back; ``touches``: a regular expression (or ``sources -> bool``) saying whether a model's code uses that thing.
    With both, a load it changed nothing in is ``stale`` when the model uses the thing and the running versions
    have it again, ``not_applicable`` otherwise; without them, ``stale``.

    Example (in an engine suite's conftest, or a file passed with ``--workarounds-from``)::

        @loadguard.workaround("my-model-rope", applies_to=["my_model"], stage="after_load",
                              reason="inv_freq left uninitialized", upstream="my-org/my-model#12",
                              targets=lambda m: ["model.rotary.inv_freq"])
        def my_model_rope(model):
            model.model.rotary.reset()
            return 1
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, not {stage!r}")
    if name == AUTO:
        raise ValueError(f"{AUTO!r} is reserved: workarounds='auto' applies the before_import workarounds whose failure matched")
    if stage == "after_load" and targets is None:
        raise ValueError(f"after_load workaround {name!r} needs targets=: the tensors it fixes, for stale detection")
    signatures = tuple(f if isinstance(f, Signature) else Signature(*f) for f in fixes)
    if isinstance(touches, str):
        touches = functools.partial(_searches, re.compile(touches))

    def register(fn):
        source = _source.get() or f"module {getattr(fn, '__module__', '?')}"
        REGISTRY[name] = Workaround(
            name, stage, fn, applies_to if callable(applies_to) else tuple(applies_to), reason, upstream, targets, needed, signatures, source,
            native, touches,
        )
        return fn

    return register


def _searches(pattern: re.Pattern, sources: list[str]) -> bool:
    return any(pattern.search(source) for source in sources)


def model_code(path: Any) -> list[str]:
    """The model's own code: the source of every ``*.py`` file of its folder (none without a local folder)."""
    folder = Path(str(path)) if path is not None else None
    if folder is None or not folder.is_dir():
        return []
    sources = []
    for file in sorted(folder.glob("*.py")):
        try:
            sources.append(file.read_text(errors="replace"))
        except OSError:
            continue
    return sources


def get(name: str) -> Workaround:
    _load_builtins()
    try:
        return REGISTRY[name]
    except KeyError:
        broken = "".join(f"; entry point {ep} could not be imported ({why})" for ep, why in sorted(_external_errors.items()))
        raise WorkaroundError(
            f"there is no workaround called {name!r}{broken}",
            f"known: {', '.join(sorted(REGISTRY))} (`loadguard workarounds list`); "
            "one of your own: register it in a file passed with --workarounds-from FILE.py",
        ) from None


def all_workarounds() -> list[Workaround]:
    _load_builtins()
    return [REGISTRY[n] for n in sorted(REGISTRY)]


def external_errors() -> dict[str, str]:
    """Entry points of the ``loadguard.workarounds`` group that failed to import, with the reason."""
    _load_builtins()
    return dict(_external_errors)


def names_of(selection: str | Sequence[str | Workaround] | None) -> list[str | Workaround]:
    """A selection as a list: ``"auto"`` or a single name becomes a one-item list."""
    if selection is None:
        return []
    if isinstance(selection, (str, Workaround)):
        return [selection]
    return list(selection)


def wants_auto(selection: str | Sequence[str | Workaround] | None) -> bool:
    """Whether the selection asks for ``auto``."""
    return any(item == AUTO for item in names_of(selection))


def resolve(selection: str | Sequence[str | Workaround] | None) -> list[Workaround]:
    """The registered workarounds a selection names (``auto`` is not one: see :func:`wants_auto`)."""
    return [n if isinstance(n, Workaround) else get(n) for n in names_of(selection) if n != AUTO]


def decides_on_memory(selection: str | Sequence[str | Workaround] | None) -> bool:
    """Whether the selection holds ``after_load`` workarounds: their staleness is read off the loaded values, so
    the load must run under :func:`loadguard.poison` (leftover memory never passes for a right value)."""
    return any(w.stage == "after_load" for w in resolve(selection))


def matching(error: BaseException, stage: str | None = "before_import") -> list[Workaround]:
    """The registered workarounds (of ``stage``; any with None) that declare ``error`` as a failure they fix."""
    return [w for w in all_workarounds() if (stage is None or w.stage == stage) and w.fixes_error(error)]


def fixes_for(error: BaseException) -> list[str]:
    """The workarounds that fix ``error``: those a loadguard error already names, else the ``before_import``
    ones that declare it."""
    return list(getattr(error, "fixes", ())) or [w.name for w in matching(error)]


@contextlib.contextmanager
def _registering_from(source: str) -> Iterator[None]:
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def _load_builtins() -> None:
    global _entry_points_loaded
    with _registering_from(BUILT_IN):
        from . import minicpmv, remote_code, transformers_v4  # noqa: F401  (registers the built-ins)
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        with _registering_from(f"entry point {ep.name} ({dist})"):
            try:
                ep.load()
            except Exception as error:  # one broken plugin must not break every load: say so where it matters
                _external_errors[f"{ep.name} ({dist})"] = f"{type(error).__name__}: {error}"


def load_file(path: str | Path) -> list[str]:
    """Import a Python file that registers workarounds (``@loadguard.workaround``); returns their names.

    Raises :class:`loadguard.errors.InvalidOptionError` for a missing file and
    :class:`loadguard.errors.WorkaroundError` when the file fails to import.
    """
    _load_builtins()
    file = Path(path)
    if not file.is_file():
        raise InvalidOptionError(f"--workarounds-from {path}: no such file", "pass a Python file that registers workarounds with @loadguard.workaround")
    resolved = file.resolve()
    module_name = "loadguard_user_workarounds_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    before = dict(REGISTRY)
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        if spec is None or spec.loader is None:
            raise InvalidOptionError(f"--workarounds-from {path}: not a Python file", "pass a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        with _registering_from(f"file {resolved}"):
            try:
                spec.loader.exec_module(module)
            except Exception as error:
                del sys.modules[module_name]
                raise WorkaroundError(
                    f"--workarounds-from {path} failed to import: {type(error).__name__}: {error}",
                    "fix the file (set LOADGUARD_DEBUG=1 to see the traceback)",
                ) from error
    return sorted(n for n, w in REGISTRY.items() if w.source == f"file {resolved}" or before.get(n) is not w)


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
def before_import(
    items: Sequence[Workaround], path: Any, config: dict, *, strict: bool = False, auto: dict[str, str] | None = None, check: bool = True
) -> Iterator[list[WorkaroundOutcome]]:
    """Run the ``before_import`` workarounds around a load; the yielded list holds their outcomes after.

    The model's remote code is imported afresh inside (transformers caches imported remote modules per
    process; an import that once succeeded with a workaround would otherwise never be retried without it, nor
    show whether the workaround was needed). ``auto`` maps the names chosen by ``workarounds="auto"`` to the
    failure that chose them.
    """
    from .. import _hf

    chosen = [w for w in items if w.stage == "before_import"]
    for item in chosen if check else ():
        _check_applies(item, config)
    outcomes: list[WorkaroundOutcome] = []
    if chosen and path is not None:
        _hf.forget_remote_code(path)
    try:
        with contextlib.ExitStack() as stack:
            usages = [(item, stack.enter_context(item.fn(path, config))) for item in chosen]
            yield outcomes
    finally:
        if chosen and path is not None:
            _hf.forget_remote_code(path)
    auto = auto or {}
    for item, usage in usages:
        why = auto.get(item.name, "")
        if usage.count:
            outcomes.append(WorkaroundOutcome(item.name, item.stage, "applied", usage.count, usage.detail, item.upstream, why))
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
        return _stale(item, f"loads {_model_label(config)} without it", strict)
    if native and item.touches(model_code(path)):
        return _stale(item, f"provides what it gives back, which {_model_label(config)} uses", strict)
    why = "its code does not use what it gives back" if native else "its load never reached what it gives back"
    return WorkaroundOutcome(item.name, item.stage, "not_applicable", 0, f"not applicable to {_model_label(config)}: {why}", item.upstream)


def _describe(error: BaseException) -> str:
    return getattr(error, "message", None) or f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def attempt(load: Callable[[tuple[str, ...]], Any], selection: Any, path: Any, config: dict, *, strict: bool = False) -> tuple[Any, list[WorkaroundOutcome]]:
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
def using(selection: str | Sequence[str | Workaround], path: Any = None, *, strict: bool = False) -> Iterator[list[WorkaroundOutcome]]:
    """The named ``before_import`` workarounds around your own ``from_pretrained`` (or construction) of the
    model in ``path``; the yielded list holds their outcomes afterwards.

    Example::

        with loadguard.workarounds.using(["v4-attn-mask-utils"], path) as outcomes:
            model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
    """
    from .. import _hf

    config = _hf.local_config(path) or {}
    items = [w for w in resolve(selection) if w.stage == "before_import"]
    # with no model folder to read, what applies cannot be told: the caller asked for these by name
    with before_import(items, path, {"_name_or_path": str(path), **config}, strict=strict, check=bool(config)) as outcomes:
        yield outcomes


CONSTRUCTION_ATTRIBUTE = "loadguard_before_import"
"""Set on a loaded model: the names of the ``before_import`` workarounds its load needed (its class may not
construct without them: its reference and eager twin are built inside them too)."""


def remember(model: Any, outcomes: Sequence[WorkaroundOutcome]) -> None:
    """Record on ``model`` which ``before_import`` workarounds its load applied."""
    names = tuple(o.name for o in outcomes if o.stage == "before_import" and o.status == "applied")
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
    from .. import _hf

    names = model_or_names if isinstance(model_or_names, (list, tuple)) else getattr(model_or_names, CONSTRUCTION_ATTRIBUTE, ())
    if not names:
        yield
        return
    model_config = getattr(model_or_names, "config", None)
    if path is None and model_config is not None:
        path = _hf.folder_of(model_config)
    if config is None:
        config = {**_hf.config_dict(model_config), **(_hf.local_config(path) or {})}
    with contextlib.ExitStack() as stack:
        for item in resolve(list(names)):
            if item.stage == "before_import":
                stack.enter_context(item.fn(path, config))
        yield


def _config_of(model: Any) -> dict:
    from .. import _hf

    return _hf.config_dict(getattr(model, "config", None))


def _targets(item: Workaround, model: Any, config: dict) -> list[str]:
    """What an ``after_load`` workaround targets in ``model``; an error when it does not apply or finds nothing."""
    _check_applies(item, config)
    targets = item.targets(model)
    if not targets:
        raise WorkaroundError(
            f"workaround {item.name} found nothing to fix in {_model_label(config)}: none of the modules it targets exist",
            "the model changed: check whether the workaround still applies, then remove or update it",
        )
    return targets


def after_load(model: Any, items: Sequence[Workaround], report: Any = None, *, strict: bool = False) -> list[WorkaroundOutcome]:
    """Run the ``after_load`` workarounds on ``model``: stale ones are skipped, ones that fix nothing raise.

    ``report`` is the audit of the model as loaded (computed here when not given).
    """
    from ..audit import audit

    outcomes = []
    config = _config_of(model)
    for item in (w for w in items if w.stage == "after_load"):
        targets = _targets(item, model, config)
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


def predict_after_load(model: Any, items: Sequence[Workaround], report: Any, *, strict: bool = False) -> list[WorkaroundOutcome]:
    """A scan's view of the ``after_load`` workarounds: ``needed`` where a target is predicted broken, ``stale``
    where every target is predicted correct. Nothing is applied (there are no weights to apply them to)."""
    outcomes = []
    config = _config_of(model)
    for item in (w for w in items if w.stage == "after_load"):
        targets = _targets(item, model, config)
        broken = sorted({f.tensor for f in report.failures} & set(targets))
        if broken:
            outcomes.append(WorkaroundOutcome(item.name, item.stage, "needed", 0, f"predicted broken: {', '.join(broken)}", item.upstream))
        else:
            outcomes.append(_stale(item, f"preserves {', '.join(targets)} (predicted)", strict))
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
    config = _config_of(runner.model)
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
    "AUTO",
    "ENTRY_POINT_GROUP",
    "REGISTRY",
    "STAGES",
    "Signature",
    "Usage",
    "Workaround",
    "WorkaroundOutcome",
    "after_load",
    "all_workarounds",
    "attempt",
    "audit_after_load",
    "before_import",
    "construction",
    "decides_on_memory",
    "external_errors",
    "fixes_for",
    "for_runner",
    "get",
    "judge_before_import",
    "load_file",
    "matching",
    "model_code",
    "predict_after_load",
    "remember",
    "resolve",
    "using",
    "wants_auto",
    "workaround",
]
