"""``loadguard compare PATH``: the model as from_pretrained leaves it vs. its eager twin, greedy, logprobs."""

from __future__ import annotations

import json

import click

from ._common import ExitCode, cases_and_runner, emit, loading_options, stderr, stdout


@click.command()
@loading_options
@click.option("--prompt", "prompts", multiple=True, help="Prompt (repeatable). Default: the zoo entry's, else a built-in set.")
@click.option("--image", "image_paths", multiple=True, type=click.Path(dir_okay=False), help="Image for every prompt (repeatable).")
@click.option("--max-tokens", default=8, show_default=True, type=click.IntRange(1, 4096))
@click.option("--num-logprobs", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--repair", "do_repair", is_flag=True, help="Audit and repair the from_pretrained model before generating.")
@click.option("--format", "fmt", type=click.Choice(["human", "json"]), default="human", show_default=True)
def compare(path, trust_remote_code, auto_class, dtype, device, poison, workarounds, strict_stale, placement, prompts, image_paths, max_tokens, num_logprobs, do_repair, fmt):
    """Greedy-generate with (A) PATH as from_pretrained leaves it and (B) the same checkpoint loaded eagerly,
    then check_logprobs_close. Exit 0 agree, 1 differ, 2 could not run."""
    from .. import audit, repair
    from .. import workarounds as registry
    from ..compare import check_logprobs_close
    from ..runner import HfRunner, eager_load

    prompt_list, images, runner = cases_and_runner(
        path, prompts, image_paths, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype, device=device, placement=placement,
        poison=poison, workarounds=workarounds, strict_stale=strict_stale,
    )
    model = runner.model
    report = repaired = None
    if do_repair:
        report = audit(model, path)
        repaired = repair(model, report) if not report.ok else None
    a = runner.generate_greedy_logprobs_limit(prompt_list, max_tokens, num_logprobs, images=images)
    applied = [w.name for w in runner.workarounds if w.stage == "before_import" and w.status == "applied"]
    twin = eager_load(path, auto_cls=auto_class, trust_remote_code=trust_remote_code, dtype=dtype, workarounds=applied)
    runner_stage = [w.name for w in registry.resolve(workarounds) if w.stage == "runner"]
    twin_runner = HfRunner.from_model(twin, runner.processor, runner.tokenizer, workarounds=runner_stage)
    b = twin_runner.generate_greedy_logprobs_limit(prompt_list, max_tokens, num_logprobs, images=images)
    name_a = "from_pretrained" + (" (repaired)" if repaired is not None else "")
    try:
        check_logprobs_close(outputs_0_lst=a, outputs_1_lst=b, name_0=name_a, name_1="eager", warn_on_mismatch=False)
        failure_text = ""
    except AssertionError as error:
        failure_text = str(error)
    ok = not failure_text
    if fmt == "json":
        document = {
            "model": str(path),
            "ok": ok,
            "prompts": prompt_list,
            "a": [{"ids": ids, "text": text} for ids, text, _ in a],
            "b": [{"ids": ids, "text": text} for ids, text, _ in b],
            "failure": failure_text or None,
            "audit": report.to_dict() if report is not None else None,
            "repair": None if repaired is None else {"repaired": list(repaired.repaired), "ok": repaired.ok},
            "workarounds": [w.to_dict() for w in runner.workarounds],
        }
        emit(json.dumps(document, indent=2))
    else:
        from rich.table import Table

        table = Table(header_style="bold")
        for column in ("prompt", f"A: {name_a}", "B: eager", "first divergence"):
            table.add_column(column, overflow="fold")
        for prompt, imgs, out_a, out_b in zip(prompt_list, images or [None] * len(prompt_list), a, b):
            label = prompt + (f" [{' + '.join(f'{i.width}x{i.height}' for i in imgs)}]" if imgs else "")
            divergence = next((i for i, (x, y) in enumerate(zip(out_a[0], out_b[0])) if x != y), None)
            table.add_row(label, out_a[1], out_b[1], "-" if divergence is None else f"token {divergence}")
        out = stdout()
        out.print(table)
        if repaired is not None:
            out.print(f"repaired before generating: {', '.join(repaired.repaired)}", highlight=False)
        out.print("agree (check_logprobs_close)" if ok else "[bold red]differ[/]: " + failure_text.splitlines()[0], highlight=False)
        if not ok:
            for line in failure_text.splitlines()[1:]:
                out.print(line, highlight=False)
            stderr().print(f"[bold]Hint:[/] run 'loadguard audit {path}{' --trust-remote-code' if trust_remote_code else ''}' to see which tensors the load got wrong, or compare with --repair", highlight=False)
    return ExitCode.CLEAN if ok else ExitCode.FINDINGS
