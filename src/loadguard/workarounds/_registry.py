"""The workaround registry: what a workaround is, how it is registered and found, and the failures it declares.

Data and lookup only: nothing here applies a workaround around a load (that is :mod:`loadguard.workarounds._apply`,
above the audit), and nothing of loadguard is imported but its errors, so the reference, the load translation and
the built-in workarounds can all use it. The built-ins (``minicpmv``, ``remote_code``, ``transformers_v4``) register
themselves here; entry points of the ``loadguard.workarounds`` group and files (:func:`load_file`) too.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import linecache
import re
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..errors import WorkaroundError, chain_of
from ..report import WorkaroundStatus

STAGES = ("before_import", "after_load", "runner")
AUTO = "auto"
ENTRY_POINT_GROUP = "loadguard.workarounds"
BUILT_IN = "built-in"


@dataclass
class Usage:
    """What a ``before_import`` workaround did during one load."""

    count: int = 0
    detail: str = ""


@functools.cache
def _regex(pattern: str) -> re.Pattern:  # once a process: some are long (v4-module-names lists every removed name)
    return re.compile(pattern)


@dataclass(frozen=True)
class Signature:
    """A failure a workaround fixes: an exception type (by name, matched along its class hierarchy) whose
    message matches ``pattern`` (a regular expression, searched); with ``raised_in``, only when it was raised through a
    function of that name (transformers' ``check_imports``: the same message from the model's own import is another
    failure)."""

    exception: str
    pattern: str
    raised_in: str | None = None
    when: Callable[[BaseException], bool] | None = field(default=None, compare=False)
    """A test of the error the pattern cannot say (``NameError: name 'BartConfig' is not defined`` is this failure only
    where the name is one a star import of transformers no longer brings)."""

    def matches(self, error: BaseException) -> bool:
        names = {cls.__name__ for cls in type(error).__mro__}
        if self.exception not in names or _regex(self.pattern).search(str(error)) is None:
            return False
        if self.raised_in is not None and not any(
            frame.name == self.raised_in for frame in traceback.extract_tb(error.__traceback__)
        ):
            return False
        return self.when is None or bool(self.when(error))

    def to_dict(self) -> dict[str, str]:
        return {
            "exception": self.exception,
            "pattern": self.pattern,
            **({"raised_in": self.raised_in} if self.raised_in else {}),
        }


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
    source_fix: Callable[[dict[str, str], dict, Any], tuple[dict[str, str], str | dict[str, str]]] | str | None = None
    """The edit of the model's own files this workaround stands for (``loadguard fix``): ``(sources, config, model) ->
    (changed sources, what it did: one sentence, or one per changed file)`` over the folder's ``*.py`` files and ``config.json`` by name (``model``: the model
    as the load built it, for what only it knows); or a sentence saying why there is none (the model needs no edit on
    transformers 5, or only a person can make it)."""
    touches: Callable[[list[str]], bool] | None = None
    """``before_import``: whether a model's code (the sources of its ``*.py`` files) uses what the workaround gives
    back: with ``native``, what tells ``stale`` (this model needed it; this transformers has it again) from
    ``not applicable`` (this model never hits it)."""

    def is_native(self) -> bool | None:
        """Whether the running transformers / torch provides what this workaround gives back (None: not declared)."""
        return bool(self.native()) if self.native is not None else None

    def fixes_error(self, error: BaseException) -> bool:
        """Whether ``error`` (or an exception it was raised from) is one of the failures this workaround fixes: by its
        declared signatures, or, for a failure that says nothing (a bare ``assert`` on a 4.x config default), by the
        line of the model's code that raised it using what this workaround gives back (``touches``)."""
        if any(signature.matches(e) for e in chain_of(error) for signature in self.fixes):
            return True
        if self.touches is None:
            return False
        lines = [line for e in chain_of(error) if _says_nothing(e) and (line := _failing_line(e)) is not None]
        return bool(lines) and bool(self.touches(lines))

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
    status: WorkaroundStatus  # (a scan's after_load: needed)
    fixed: int = 0
    detail: str = ""
    upstream: str = ""
    auto: str = ""
    """Set when ``workarounds="auto"`` chose it: the failure that made it apply."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "auto": self.auto or None}


REGISTRY: dict[str, Workaround] = {}
# Where a registration happening now comes from (set while loadguard imports an entry point or a file).
_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("loadguard_workaround_source", default=None)
_external_errors: dict[str, str] = {}  # entry point -> why it could not be imported
_entry_points_loaded = False


def _says_nothing(error: BaseException) -> bool:
    """An error with no message to match: a bare ``assert``, a ``raise ValueError()``."""
    return not str(error).strip()


def _failing_line(error: BaseException) -> str | None:
    """The source line of the innermost frame of the model's own code (remote code: ``transformers_modules``) that the
    error passed through."""
    line = None
    for frame in traceback.extract_tb(error.__traceback__):
        if "transformers_modules" in frame.filename:
            line = linecache.getline(frame.filename, frame.lineno).strip() or frame.line or line
    return line


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
    source_fix: Callable[[dict[str, str], dict, Any], tuple[dict[str, str], str | dict[str, str]]] | str | None = None,
):
    """Register the decorated function as workaround ``name`` (see the module docstring for stages).

    ``applies_to``: model types and/or architecture names, or a predicate on the config dict.
    ``upstream``: where the real fix is tracked, ``"<project>#<issue>"``.
    ``fixes``: the failures it fixes, as ``(exception type name, message regex)`` pairs: errors that match
    name it in their hint, and ``workarounds="auto"`` applies it when the load fails that way.
    ``native`` (``before_import``): ``() -> bool``, whether the running transformers / torch has what it gives
    back; ``touches``: a regular expression (or ``sources -> bool``) saying whether a model's code uses that thing.
    ``source_fix``: the edit of the model's files it stands for (see :attr:`Workaround.source_fix`), or why none.
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
        raise ValueError(
            f"{AUTO!r} is reserved: workarounds='auto' applies the before_import workarounds whose failure matched"
        )
    if stage == "after_load" and targets is None:
        raise ValueError(f"after_load workaround {name!r} needs targets=: the tensors it fixes, for stale detection")
    signatures = tuple(f if isinstance(f, Signature) else Signature(*f) for f in fixes)
    if isinstance(touches, str):
        touches = functools.partial(_searches, re.compile(touches))

    def register(fn):
        source = _source.get() or f"module {getattr(fn, '__module__', '?')}"
        REGISTRY[name] = Workaround(
            name,
            stage,
            fn,
            applies_to if callable(applies_to) else tuple(applies_to),
            reason,
            upstream,
            targets,
            needed,
            signatures,
            source,
            native,
            source_fix=source_fix,
            touches=touches,
        )
        return fn

    return register


def _searches(pattern: re.Pattern, sources: list[str]) -> bool:
    return any(pattern.search(source) for source in sources)


def model_code(path: Any) -> list[str]:
    """The model's own code: the source of every ``*.py`` file of its folder, and its config.json (whose auto_map names
    the classes it is loaded with); none without a local folder."""
    folder = Path(str(path)) if path is not None else None
    if folder is None or not folder.is_dir():
        return []
    sources = []
    for file in sorted(folder.glob("*.py")) + sorted(folder.glob("config.json")):
        try:
            sources.append(file.read_text(errors="replace"))
        except OSError:
            continue
    return sources


def get(name: str) -> Workaround:
    load_builtins()
    try:
        return REGISTRY[name]
    except KeyError:
        broken = "".join(
            f"; entry point {ep} could not be imported ({why})" for ep, why in sorted(_external_errors.items())
        )
        raise WorkaroundError(
            f"there is no workaround called {name!r}{broken}",
            f"known: {', '.join(sorted(REGISTRY))} (`loadguard workarounds list`); "
            "one of your own: register it in a file passed with --workarounds-from FILE.py",
        ) from None


def all_workarounds() -> list[Workaround]:
    load_builtins()
    return [REGISTRY[n] for n in sorted(REGISTRY)]


def external_errors() -> dict[str, str]:
    """Entry points of the ``loadguard.workarounds`` group that failed to import, with the reason."""
    load_builtins()
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


def compile_signatures() -> int:
    """Compile every failure pattern now (~35 ms: done once before a fleet forks, :mod:`loadguard._scan.warmup`); how many."""
    return len({_regex(signature.pattern) for w in all_workarounds() for signature in w.fixes})


def fixes_for(error: BaseException) -> list[str]:
    """The workarounds that fix ``error``: those a loadguard error already names, else the ``before_import``
    ones that declare it."""
    return list(getattr(error, "fixes", ())) or [w.name for w in matching(error)]


@contextlib.contextmanager
def registering_from(source: str) -> Iterator[None]:
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def load_builtins() -> None:
    """Entry points of the ``loadguard.workarounds`` group, imported once (the built-ins are registered by the
    package itself, before anything can look a workaround up)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
        with registering_from(f"entry point {ep.name} ({dist})"):
            try:
                ep.load()
            except Exception as error:  # one broken plugin must not break every load: say so where it matters
                _external_errors[f"{ep.name} ({dist})"] = f"{type(error).__name__}: {error}"


CONSTRUCTION_ATTRIBUTE = "loadguard_before_import"
"""Set on a loaded model: the names of the ``before_import`` workarounds its load needed (its class may not
construct without them: its reference and eager twin are built inside them too)."""


@contextlib.contextmanager
def activate(names: Sequence[str], path: Any, config: dict) -> Iterator[None]:
    """The named ``before_import`` workarounds active again, their outcomes discarded: for constructing a model's
    class once more (its reference, its eager twin, a zoo model) the way its load needed."""
    with contextlib.ExitStack() as stack:
        for item in resolve(list(names)):
            if item.stage == "before_import":
                stack.enter_context(item.fn(path, config))
        yield


__all__ = [
    "AUTO",
    "BUILT_IN",
    "CONSTRUCTION_ATTRIBUTE",
    "ENTRY_POINT_GROUP",
    "REGISTRY",
    "STAGES",
    "Signature",
    "Usage",
    "Workaround",
    "WorkaroundOutcome",
    "activate",
    "all_workarounds",
    "compile_signatures",
    "decides_on_memory",
    "external_errors",
    "fixes_for",
    "get",
    "matching",
    "model_code",
    "names_of",
    "resolve",
    "wants_auto",
    "workaround",
]
