"""The reference side of ``compare`` and ``trace``, and what a crash of the loaded model means next to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._infra import styled
from ..errors import LoadguardError, ModelRunError, ReferenceBuildError, command_line
from ..report import WorkaroundStatus
from ._common import progress


def reference_runner(path: str, runner, *, auto_class, trust_remote_code: bool, dtype: str, workarounds):
    """The reference side of ``compare`` and ``trace``: ``path`` built eagerly (its ``__init__`` runs as written on
    real tensors, then the checkpoint is copied in) with the workarounds the load needed, around the same processor.
    A failure to build it is a :class:`ReferenceBuildError`, never a crash of the command."""
    from .. import workarounds as registry
    from ..runner import HfRunner, eager_load

    applied = [
        w.name for w in runner.workarounds if w.stage == "before_import" and w.status == WorkaroundStatus.APPLIED
    ]
    try:
        with progress(f"Building the reference of {path} eagerly"):
            twin = eager_load(
                path, auto_cls=auto_class, trust_remote_code=trust_remote_code, dtype=dtype, workarounds=applied
            )
    except LoadguardError:
        raise
    except Exception as error:
        raise ReferenceBuildError(
            f"could not build the reference of {path} eagerly ({type(error).__name__}: {error})",
            "to check the load without a reference, run: "
            + command_line("audit", path, trust_remote_code=trust_remote_code, workarounds=applied),
        ) from error
    runner_stage = [w.name for w in registry.resolve(workarounds) if w.stage == "runner"]
    return HfRunner.from_model(twin, runner.processor, runner.tokenizer, workarounds=runner_stage)


def attribute_crash(path: str, model, crash, reference_crash, *, trust_remote_code: bool, workarounds):
    """A crash of the loaded model that the reference does not have is what the load broke (a
    :class:`loadguard.runner.crash.BrokenRun`, the audit's wrong tensors nearest it); one the reference has too is
    the model's own, and the command cannot run (:class:`ModelRunError`). None when the loaded model did not crash."""
    from .. import workarounds as registry
    from ..runner import explain

    if reference_crash is not None:
        active = {w.name for w in registry.resolve(workarounds)}
        fixes = [name for name in reference_crash.fixes if name not in active]
        fix_line = command_line("fix", path, trust_remote_code=trust_remote_code, extra=("--out", "DIR"))
        hint = (
            "its code calls what this transformers removed when it runs, after the load (--workaround auto answers "
            f"failures met while loading): run again with {' '.join(f'--workaround {name}' for name in fixes)}"
            if fixes
            else f"workaround {', '.join(reference_crash.fixes)} gives it back only while the model loads; the change "
            f"its code needs to run on this transformers is written by: {fix_line}"
            if reference_crash.fixes
            else "check the prompt and images (--prompt, --image); to check the load without running the model, run: "
            + command_line("audit", path, trust_remote_code=trust_remote_code, workarounds=workarounds)
        )
        raise ModelRunError(
            f"{path} raises {reference_crash.describe()} also when built eagerly from its code and checkpoint: "
            "the failure is the model's or the input's, not the load's",
            hint,
        )
    if crash is None:
        return None
    return explain(model, path, crash)


def run_row(path: str, mode: str, model_class: str, *, broken=None, failure=None, findings=()):
    """``compare``'s or ``trace``'s result as a :class:`loadguard.formats.Row` for the machine formats: a crash the
    load broke (``broken``), else what the run did wrong (``failure``, a :class:`~loadguard.formats.RunFailure`), with
    the tensors behind it."""
    from ..formats import Row, RunFailure

    if broken is not None:
        crash = broken.crash
        failure = RunFailure(
            "raised",
            f"the loaded model raised {crash.describe()}; the reference runs the same call",
            crash.module,
            crash.location,
        )
        findings = broken.tensors
    return Row.from_run(str(path), model_class, mode, findings, failure)


@dataclass(frozen=True)
class Crashed:
    """The loaded model raised where its reference runs (``compare``, ``trace``): ``document`` the command's own JSON
    keys besides ``crash``, ``hint`` the next step."""

    command: str
    path: str
    model_class: str
    broken: Any
    fields: dict
    hint: str

    def document(self) -> dict:
        return {**self.fields, "crash": self.broken.to_dict()}

    def rows(self):
        return [run_row(self.path, self.command, self.model_class, broken=self.broken)]

    def table(self, out, err) -> None:
        for line in self.broken.describe().split("\n"):  # loadguard's own line breaks; the model's text stays escaped
            out.print(line, highlight=False, markup=False)
        err.print(styled("[bold]Hint:[/] {}", self.hint), highlight=False)
