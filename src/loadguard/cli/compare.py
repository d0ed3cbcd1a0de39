"""``loadguard compare PATH``: the model as from_pretrained leaves it vs. its eager twin, greedy, logprobs."""

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
@click.option("--prompt", "prompts", multiple=True, help="Prompt (repeatable). Default: the zoo entry's, else a built-in set.")
@click.option("--image", "image_paths", multiple=True, type=click.Path(dir_okay=False), help="Image for every prompt (repeatable).")
@click.option("--max-tokens", default=8, show_default=True, type=click.IntRange(1, 4096))
@click.option("--num-logprobs", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--repair", "do_repair", is_flag=True, help="Audit and repair the from_pretrained model before generating.")
@format_option("json", "sarif", "github", "junit", help="sarif, github, junit: what differs, at the line of code behind it (as audit's).")
def compare(path, trust_remote_code, auto_class, dtype, device, poison, workarounds, strict_stale, placement, prompts, image_paths, max_tokens, num_logprobs, do_repair, fmt):
    """Greedy-generate with (A) PATH as from_pretrained leaves it and (B) the same checkpoint loaded eagerly,
    then check_logprobs_close. Exit 0 agree, 1 differ (or A raises where B runs), 2 could not run."""
    from .. import audit, repair
    from ..compare import check_logprobs_close
    from ..formats import EMITTED, RunFailure
    from ..runner.crash import guarded

    prompt_list, images, runner = cases_and_runner(
        path, prompts, image_paths, trust_remote_code=trust_remote_code, auto_class=auto_class, dtype=dtype, device=device, placement=placement,
        poison=poison, workarounds=workarounds, strict_stale=strict_stale,
    )
    model = runner.model
    report = repaired = None
    if do_repair:
        report = audit(model, path)
        repaired = repair(model, report) if not report.ok else None
    # each side runs in its own guard: a crash of the loaded model is a finding once the reference runs the same call
    a, crash = guarded(model, lambda: runner.generate_greedy_logprobs_limit(prompt_list, max_tokens, num_logprobs, images=images))
    twin_runner = reference_runner(path, runner, auto_class=auto_class, trust_remote_code=trust_remote_code, dtype=dtype, workarounds=workarounds)
    b, reference_crash = guarded(twin_runner.model, lambda: twin_runner.generate_greedy_logprobs_limit(prompt_list, max_tokens, num_logprobs, images=images))
    broken = attribute_crash(path, model, crash, reference_crash, trust_remote_code=trust_remote_code, workarounds=workarounds)
    next_step = command_line("compare", path, trust_remote_code=trust_remote_code, workarounds=workarounds, extra=("--repair",))
    if broken is not None:
        if fmt in EMITTED:
            emit_row(fmt, run_row(path, "compare", model, broken=broken), "compare")
        elif fmt == "json":
            emit(json.dumps({"model": str(path), "ok": False, "prompts": prompt_list, "crash": broken.to_dict(), "next": next_step}, indent=2))
        else:
            stdout().print(broken.describe(), highlight=False, markup=False)
            if do_repair:
                audit_line = command_line("audit", path, trust_remote_code=trust_remote_code, workarounds=workarounds, extra=("--repair",))
                stderr().print(f"[bold]Hint:[/] the repair did not fix it: '{audit_line}' says what it could not repair", highlight=False)
            else:
                stderr().print(f"[bold]Hint:[/] '{next_step}' repairs those tensors in memory and compares again", highlight=False)
        return ExitCode.FINDINGS
    name_a = "from_pretrained" + (" (repaired)" if repaired is not None else "")
    try:
        check_logprobs_close(outputs_0_lst=a, outputs_1_lst=b, name_0=name_a, name_1="eager", warn_on_mismatch=False)
        failure_text = ""
    except AssertionError as error:
        failure_text = str(error)
    ok = not failure_text
    wrong = ()  # outputs differ: what the audit finds wrong in the model that produced them
    if not ok:
        wrong = (repaired.after if repaired is not None else report if report is not None else audit(model, path)).failures
    if fmt in EMITTED:
        failure = None if ok else RunFailure("differ", f"greedy outputs differ from the reference's: {failure_text.splitlines()[0]}")
        emit_row(fmt, run_row(path, "compare", model, failure=failure, findings=wrong), "compare")
    elif fmt == "json":
        document = {
            "model": str(path),
            "ok": ok,
            "prompts": prompt_list,
            "a": [{"ids": ids, "text": text} for ids, text, _ in a],
            "b": [{"ids": ids, "text": text} for ids, text, _ in b],
            "failure": failure_text or None,
            "crash": None,
            "wrong_tensors": [f.to_dict() for f in wrong],
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
                out.print(line, highlight=False, markup=False)
            if wrong:
                out.print("the load left these wrong:", highlight=False)
                for finding in wrong:
                    out.print(f"  {finding.tensor} ({finding.status}): {finding.detail}", highlight=False, markup=False)
            else:
                out.print("the audit finds no wrong tensor: the outputs differ for another reason (dtype, kernels, code the load ran)", highlight=False)
            if repaired is None:
                stderr().print(f"[bold]Hint:[/] '{next_step}' repairs them in memory and compares again", highlight=False)
    return ExitCode.CLEAN if ok else ExitCode.FINDINGS
