"""``loadguard trace PATH``: one forward pass with hooks; where does NaN/Inf first appear, and why."""

from __future__ import annotations

import json

import click

from ._common import ExitCode, load_model, loading_options, quiet_transformers, stdout


@click.command()
@loading_options
@click.option("--prompt", default=None, help="Prompt for the forward pass. Default: the zoo entry's first, else a built-in one.")
@click.option("--image", "image_paths", multiple=True, type=click.Path(dir_okay=False), help="Image(s) for the prompt (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["human", "json"]), default="human", show_default=True)
def trace(path, trust_remote_code, auto_class, dtype, device, poison, prompt, image_paths, fmt):
    """Report the first module whose output holds NaN/Inf, its non-finite inputs and the tensors behind it.
    Exit 0 finite, 1 non-finite found, 2 could not run."""
    from transformers import AutoProcessor, AutoTokenizer

    from ..runner import HfRunner, default_cases
    from ..runner.hf_runner import _optional
    from ..runner.trace import trace as run_trace
    from .compare import _images

    prompts, images = default_cases(path)
    if prompt is not None:
        prompts, images = [prompt], [_images(image_paths)] if image_paths else None
    elif image_paths:
        images = [_images(image_paths)] * len(prompts)
    model = load_model(path, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype, device=device, poison=poison)
    quiet_transformers()
    processor = _optional(lambda: AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code))
    tokenizer = _optional(lambda: AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code))
    runner = HfRunner.from_model(model, processor, tokenizer)
    inputs = runner._inputs(prompts[0], images[0] if images else None)
    result = run_trace(model, inputs)
    if fmt == "json":
        click.echo(json.dumps({"model": str(path), "prompt": prompts[0], **result.to_dict()}, indent=2))
    else:
        stdout().print(result.describe(), highlight=False)
    return ExitCode.CLEAN if result.finite else ExitCode.FINDINGS
