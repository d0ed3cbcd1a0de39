"""Every exception loadguard raises. Each says what happened and what to do next.

All derive from :class:`LoadguardError`, whose ``hint`` is the next step for the user; the CLI prints
``Error: <message>`` and ``Hint: <hint>`` and exits with code 2.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable


class LoadguardError(Exception):
    """Base class: ``str(err)`` is one sentence saying what went wrong, ``err.hint`` what to do."""

    hint: str = ""
    fixes: tuple[str, ...] = ()
    """Registered workarounds that fix this failure (each declares it): the CLI says ``--workaround NAME``,
    the pytest plugin the marker, the API ``workarounds=[...]``."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


def fixes_hint(names: Iterable[str], how: str = "api") -> str:
    """What to do about a failure the registered workarounds ``names`` fix, as the API (``workarounds=[...]``),
    the CLI (``--workaround NAME``) or the pytest plugin (the marker) words it."""
    names = list(names)
    if how == "pytest":
        return (
            f"known failure of code written for older transformers/torch: mark the test "
            f"@pytest.mark.loadguard(workarounds={names!r}) (or workarounds='auto': every workaround the load then needs; "
            "a whole module: pytestmark = pytest.mark.loadguard(workarounds='auto'))"
        )
    if how == "cli":
        flags = " ".join(f"--workaround {name}" for name in names)
        return f"known failure of code written for older transformers/torch: run again with {flags} (or --workaround auto)"
    return f"a known failure of code written for older transformers/torch: pass workarounds={names!r} (or workarounds='auto') to loadguard.load / HfRunner / eager_load"


def eager_hint(how: str = "api") -> str:
    """How to load with eager attention, as the CLI, the pytest plugin or the API says it."""
    if how == "cli":
        return 'run again with --attn-implementation eager (from_pretrained(..., attn_implementation="eager") in code)'
    return (
        'load with attn_implementation="eager": from_pretrained(path, attn_implementation="eager"), '
        'loadguard.load(..., attn_implementation="eager") or HfRunner(path, model_kwargs={"attn_implementation": "eager"})'
    )


def hint_for(error: LoadguardError, how: str = "cli") -> str:
    """The hint for ``error`` as the CLI or the pytest plugin words it (see :func:`fixes_hint`)."""
    if error.fixes:
        return fixes_hint(error.fixes, how)
    if isinstance(error, EagerAttentionNeededError):
        return eager_hint(how)
    return error.hint


def command_line(
    command: str, path: str, *, trust_remote_code: bool = False, workarounds=(), extra: tuple[str, ...] = ()
) -> str:
    """The ``loadguard`` command a hint suggests, with the loading flags the user ran with, quoted to paste."""
    words = ["loadguard", *command.split(), path]
    if trust_remote_code:
        words.append("--trust-remote-code")
    for name in workarounds:
        words += ["--workaround", name]
    return shlex.join([*words, *extra])


def fix_command_line(path: str, *, trust_remote_code: bool = False) -> str:
    """The ``loadguard fix`` command that writes the lasting change for a model's author: a fixed copy beside the
    folder (a Hub id's copy in the current folder), with the loading flags its load needed. ``fix`` finds the
    workarounds the original needs by itself (``auto``)."""
    text = str(path).rstrip("/") or str(path)
    name = os.path.basename(text) or "model"
    out = os.path.join(os.path.dirname(text), f"{name}-fixed") if os.path.isdir(text) else f"{name}-fixed"
    return command_line("fix", str(path), trust_remote_code=trust_remote_code, extra=("--out", out))


def chain_of(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from or while handling, innermost last (each once)."""
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


class UnknownZooEntryError(LoadguardError, KeyError):
    def __init__(self, name: str, known: Iterable[str]):
        super().__init__(
            f"there is no zoo entry called {name!r}",
            f"choose one of: {', '.join(known)} (`loadguard zoo list` describes them)",
        )

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.message


class FolderNotEmptyError(LoadguardError):
    def __init__(self, folder: str):
        super().__init__(
            f"{folder} already exists and is not empty; loadguard never writes over existing files",
            "pass a new or empty folder",
        )


class BrokenEnvironmentError(LoadguardError):
    """The Python environment cannot import what loading needs (a package built for another torch, a stand-in on
    ``PYTHONPATH``): not the model's fault, nor loadguard's."""


class ModelNotFoundError(LoadguardError):
    """A path that does not exist, or a Hub id the Hub does not have (or does not let you see)."""


class HubUnreachableError(ModelNotFoundError):
    """A Hub id that could not be looked up: no connection to the Hub (or HF_HUB_OFFLINE set) and nothing cached. Not
    the same as missing: the model may well exist."""


class HubAccessError(ModelNotFoundError):
    """The Hub will not show this repository to this request: gated (403), or private or missing (401); a token
    (``HF_TOKEN``, ``hf auth login``) that can read it is the way in."""


class ModelConfigError(LoadguardError):
    """No usable config: missing ``config.json``, unknown architecture, unreadable config."""


class RemoteCodeNotTrustedError(LoadguardError):
    """The model needs its own code and ``trust_remote_code`` was not given."""


class RemoteCodeImportError(LoadguardError):
    """The model's own code raised while being imported or constructed."""


class CheckpointError(LoadguardError):
    """A checkpoint that cannot be read: missing, corrupt, truncated, or an index naming a missing shard."""


class NoWeightsError(CheckpointError):
    """A model folder with its code and config and no checkpoint at all (not a damaged one): what can be done
    without weights is ``scan`` and a weightless ``fix``."""

    def __init__(self, folder: str, detail: str = ""):
        super().__init__(
            f"{folder} holds no weights, only code and config{f' ({detail})' if detail else ''}",
            f"predict the load without them: loadguard scan {folder} --trust-remote-code; write and prove the fix "
            f"without them: loadguard fix {folder} --out DIR --trust-remote-code",
        )


class ReferenceBuildError(LoadguardError):
    """The model's class could not be constructed from its config to build the reference."""


class InvalidOptionError(LoadguardError):
    """An argument that is not valid: unknown dtype, unavailable device, unknown policy."""


class BrokenModelError(LoadguardError):
    """Raised by ``load(on_problem="raise")``: the loaded model is not what its code and checkpoint define.

    ``report`` is the :class:`loadguard.AuditReport` of the load.
    """

    def __init__(self, report, message: str, hint: str):
        super().__init__(message, hint)
        self.report = report

    def __str__(self) -> str:  # a test failure shows the fix too
        return f"{self.message}\nHint: {self.hint}"


class WorkaroundError(LoadguardError):
    """A workaround that is unknown, does not apply to the model, or applied and fixed nothing."""


class StaleWorkaroundError(WorkaroundError):
    """Strict mode: a workaround is no longer needed (what it fixes is already correct)."""


class RunnerConsistencyError(LoadguardError):
    """The reference runner's outputs contradict themselves (e.g. a generated id that is not its step's argmax)."""


class EagerAttentionNeededError(LoadguardError):
    """The model's code fails under the attention kernel it was loaded with (SDPA, flash) and runs with eager
    attention: it was written for eager only (observed by running it again with eager, never guessed)."""

    hint = eager_hint("api")


class ScanError(LoadguardError):
    """A model that cannot be scanned without its weights (its class loads its own weights, or the installed
    transformers lacks what the scan relies on)."""


class ModelCodeExitedError(LoadguardError):
    """The model's code asked to end loadguard's process (``os._exit``, ``sys.exit``) while it loaded: refused, and
    reported as a run that could not check anything, never as a success."""

    hint = "the model's code ends the process that loads it: read it (a guard meant for a script run as __main__?)"


class ModelRunError(LoadguardError):
    """The model's own code raises on the same inputs in the reference too (built eagerly, every tensor as its code
    and checkpoint define it): the failure is not the load's, so loadguard cannot attribute it."""


class ExecutorError(LoadguardError):
    """The executor a command was told to use cannot run it: Ray not installed, no cluster at the address given."""


class LoadguardWarning(UserWarning):
    """Issued by ``load(on_problem="warn")`` when a model loaded broken (also ``loadguard.errors.LoadguardWarning``)."""
