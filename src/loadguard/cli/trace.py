"""``loadguard trace PATH``: one forward pass with hooks; where does NaN/Inf first appear, and why."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import click

from ..errors import command_line
from ._common import ExitCode, cases_and_runner, loading_options
from ._limits import limits_options
from ._options import format_option
from ._output import write
from ._reference import Crashed, attribute_crash, reference_runner, run_row


@click.command()
@limits_options
@loading_options
@click.option(
    "--prompt", default=None, help="Prompt for the forward pass. Default: the zoo entry's first, else a built-in one."
)
@click.option(
    "--image",
    "image_paths",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Image(s) for the prompt (repeatable).",
)
@format_option(
    "json",
    "sarif",
    "github",
    "junit",
    help="sarif, github, junit: the module where NaN/Inf first appears, at its class.",
)
def trace(
    path,
    trust_remote_code,
    auto_class,
    dtype,
    device,
    poison,
    workarounds,
    strict_stale,
    placement,
    prompt,
    image_paths,
    fmt,
):
    """Report the first module whose output holds NaN/Inf, its non-finite inputs and the tensors behind it.
    Exit 0 finite, 1 non-finite found (or the loaded model raises where the reference runs), 2 could not run."""
    from .._files import read_config

    read_config(path, trust_remote_code)  # answered before torch is imported
    from ..runner import guarded
    from ..runner import trace as run_trace

    prompts, images, runner = cases_and_runner(
        path,
        [prompt] if prompt else [],
        image_paths,
        trust_remote_code=trust_remote_code,
        auto_class=auto_class,
        dtype=dtype,
        device=device,
        placement=placement,
        poison=poison,
        workarounds=workarounds,
        strict_stale=strict_stale,
    )
    step_images = images[:1] if images else None
    # one greedy step through the runner: the model's own generate path, whatever its forward takes
    result, crash = guarded(
        runner.model,
        lambda: run_trace(runner.model, run=lambda: runner.generate_greedy(prompts[:1], 1, images=step_images)),
    )
    if crash is not None:  # the loaded model raised: the load's doing if the reference runs the same step
        twin = reference_runner(
            path,
            runner,
            auto_class=auto_class,
            trust_remote_code=trust_remote_code,
            dtype=dtype,
            workarounds=workarounds,
        )
        _, reference_crash = guarded(twin.model, lambda: twin.generate_greedy(prompts[:1], 1, images=step_images))
        broken = attribute_crash(
            path, runner.model, crash, reference_crash, trust_remote_code=trust_remote_code, workarounds=workarounds
        )
        repair_line = command_line(
            "audit", path, trust_remote_code=trust_remote_code, workarounds=workarounds, extra=("--repair",)
        )
        fields = {"model": str(path), "prompt": prompts[0], "finite": None, "next": repair_line}
        write(
            fmt,
            Crashed(
                "trace",
                str(path),
                type(runner.model).__name__,
                broken,
                fields,
                f"whether those tensors can be repaired in memory is shown by: {repair_line}",
            ),
        )
        return ExitCode.FINDINGS
    write(fmt, _Traced(str(path), type(runner.model).__name__, prompts[0], result, _non_finite(runner.model, result)))
    return ExitCode.CLEAN if result.finite else ExitCode.FINDINGS


@dataclass(frozen=True)
class _Traced:
    path: str
    model_class: str
    prompt: str
    result: Any
    failure: Any
    command = "trace"

    def document(self) -> dict:
        return {"model": self.path, "prompt": self.prompt, **self.result.to_dict(), "crash": None}

    def rows(self):
        return [run_row(self.path, "trace", self.model_class, failure=self.failure)]

    def table(self, out, err) -> None:
        for line in self.result.describe().split("\n"):  # loadguard's own line breaks; the model's text stays escaped
            out.print(line, highlight=False)


def _non_finite(model, result):
    """A non-finite forward as a run failure, located at the class of the module it first came out of."""

    from .._infra import located
    from ..formats import RunFailure

    if result.finite:
        return None
    try:
        cls = type(model if result.module == "(model)" else model.get_submodule(result.module))
        location = located(inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1])
    except (AttributeError, OSError, TypeError):  # a class without source (built-in, made at run time)
        location = None
    return RunFailure("non_finite", result.describe().replace("\n", ";").replace("  ", " "), result.module, location)
