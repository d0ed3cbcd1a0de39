"""``loadguard trace PATH``: one forward pass with hooks; where does NaN/Inf first appear, and why."""

from __future__ import annotations

import json

import click

from ._limits import limits_options
from ._common import ExitCode, cases_and_runner, command_line, emit, loading_options, stderr, stdout
from ._options import format_option
from ._reference import attribute_crash, emit_row, reference_runner, run_row


@click.command()
@limits_options
@loading_options
@click.option("--prompt", default=None, help="Prompt for the forward pass. Default: the zoo entry's first, else a built-in one.")
@click.option("--image", "image_paths", multiple=True, type=click.Path(dir_okay=False), help="Image(s) for the prompt (repeatable).")
@format_option("json", "sarif", "github", "junit", help="sarif, github, junit: the module where NaN/Inf first appears, at its class.")
def trace(path, trust_remote_code, auto_class, dtype, device, poison, workarounds, strict_stale, placement, prompt, image_paths, fmt):
    """Report the first module whose output holds NaN/Inf, its non-finite inputs and the tensors behind it.
    Exit 0 finite, 1 non-finite found (or the loaded model raises where the reference runs), 2 could not run."""
    from ..formats import EMITTED
    from ..runner.crash import guarded
    from ..runner.trace import trace as run_trace

    prompts, images, runner = cases_and_runner(
        path, [prompt] if prompt else [], image_paths, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype,
        device=device, placement=placement, poison=poison, workarounds=workarounds, strict_stale=strict_stale,
    )
    step_images = images[:1] if images else None
    # one greedy step through the runner: the model's own generate path, whatever its forward takes
    result, crash = guarded(runner.model, lambda: run_trace(runner.model, run=lambda: runner.generate_greedy(prompts[:1], 1, images=step_images)))
    if crash is not None:  # the loaded model raised: the load's doing if the reference runs the same step
        twin = reference_runner(path, runner, auto_class=auto_class, trust_remote_code=trust_remote_code, dtype=dtype, workarounds=workarounds)
        _, reference_crash = guarded(twin.model, lambda: twin.generate_greedy(prompts[:1], 1, images=step_images))
        broken = attribute_crash(path, runner.model, crash, reference_crash, trust_remote_code=trust_remote_code, workarounds=workarounds)
        repair_line = command_line("audit", path, trust_remote_code=trust_remote_code, workarounds=workarounds, extra=("--repair",))
        if fmt in EMITTED:
            emit_row(fmt, run_row(path, "trace", runner.model, broken=broken), "trace")
        elif fmt == "json":
            emit(json.dumps({"model": str(path), "prompt": prompts[0], "finite": None, "crash": broken.to_dict(), "next": repair_line}, indent=2))
        else:
            stdout().print(broken.describe(), highlight=False, markup=False)
            stderr().print(f"[bold]Hint:[/] '{repair_line}' shows whether those tensors can be repaired in memory", highlight=False)
        return ExitCode.FINDINGS
    if fmt in EMITTED:
        emit_row(fmt, run_row(path, "trace", runner.model, failure=_non_finite(runner.model, result)), "trace")
    elif fmt == "json":
        emit(json.dumps({"model": str(path), "prompt": prompts[0], **result.to_dict(), "crash": None}, indent=2))
    else:
        stdout().print(result.describe(), highlight=False)
    return ExitCode.CLEAN if result.finite else ExitCode.FINDINGS


def _non_finite(model, result):
    """A non-finite forward as a run failure, located at the class of the module it first came out of."""
    import inspect

    from .._locations import located
    from ..formats import RunFailure

    if result.finite:
        return None
    try:
        cls = type(model if result.module == "(model)" else model.get_submodule(result.module))
        location = located(inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1])
    except (AttributeError, OSError, TypeError):  # a class without source (built-in, made at run time)
        location = None
    return RunFailure("non_finite", result.describe().replace("\n", ";").replace("  ", " "), result.module, location)
