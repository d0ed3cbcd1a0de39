"""``loadguard compare PATH``: the model as from_pretrained leaves it vs. its eager twin, greedy, logprobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from .._infra import styled
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
    "--prompt", "prompts", multiple=True, help="Prompt (repeatable). Default: the zoo entry's, else a built-in set."
)
@click.option(
    "--image",
    "image_paths",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Image for every prompt (repeatable).",
)
@click.option("--max-tokens", default=8, show_default=True, type=click.IntRange(1, 4096))
@click.option("--num-logprobs", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--repair",
    "do_repair",
    is_flag=True,
    help="Audit and repair the from_pretrained model before generating: exit 0 when the repaired outputs agree.",
)
@click.option(
    "--exit-non-zero-on-repair",
    "strict_repair",
    is_flag=True,
    help="With --repair: exit 1 when anything needed repairing, even if the outputs then agree.",
)
@format_option(
    "json",
    "sarif",
    "github",
    "junit",
    help="sarif, github, junit: what differs, at the line of code behind it (as audit's).",
)
def compare(
    path,
    trust_remote_code,
    auto_class,
    dtype,
    device,
    poison,
    workarounds,
    strict_stale,
    placement,
    prompts,
    image_paths,
    max_tokens,
    num_logprobs,
    do_repair,
    strict_repair,
    fmt,
):
    """Greedy-generate with (A) PATH as from_pretrained leaves it and (B) the same checkpoint loaded eagerly,
    then check_logprobs_close. Exit 0 agree, 1 differ (or A raises where B runs), 2 could not run."""
    from .._files import read_config

    read_config(path, trust_remote_code)  # answered before torch is imported
    from .._audit import audit, repair
    from ..compare import check_logprobs_close
    from ..runner import guarded

    prompt_list, images, runner = cases_and_runner(
        path,
        prompts,
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
    model = runner.model
    report = repaired = None
    if do_repair:
        report = audit(model, path)
        repaired = repair(model, report) if not report.ok else None
    # each side runs in its own guard: a crash of the loaded model is a finding once the reference runs the same call
    a, crash = guarded(
        model, lambda: runner.generate_greedy_logprobs_limit(prompt_list, max_tokens, num_logprobs, images=images)
    )
    twin_runner = reference_runner(
        path, runner, auto_class=auto_class, trust_remote_code=trust_remote_code, dtype=dtype, workarounds=workarounds
    )
    b, reference_crash = guarded(
        twin_runner.model,
        lambda: twin_runner.generate_greedy_logprobs_limit(prompt_list, max_tokens, num_logprobs, images=images),
    )
    broken = attribute_crash(
        path, model, crash, reference_crash, trust_remote_code=trust_remote_code, workarounds=workarounds
    )
    next_step = command_line(
        "compare", path, trust_remote_code=trust_remote_code, workarounds=workarounds, extra=("--repair",)
    )
    if broken is not None:
        if do_repair:
            audit_line = command_line(
                "audit", path, trust_remote_code=trust_remote_code, workarounds=workarounds, extra=("--repair",)
            )
            hint = f"the repair did not fix it; what it could not repair is said by: {audit_line}"
        else:
            hint = f"to repair those tensors in memory and compare again, run: {next_step}"
        fields = {"model": str(path), "ok": False, "prompts": prompt_list, "next": next_step}
        write(fmt, Crashed("compare", str(path), type(model).__name__, broken, fields, hint))
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
        wrong = (
            repaired.after if repaired is not None else report if report is not None else audit(model, path)
        ).failures
    write(
        fmt,
        _Compared(
            str(path),
            type(model).__name__,
            prompt_list,
            images,
            a,
            b,
            name_a,
            failure_text,
            tuple(wrong),
            report,
            repaired,
            tuple(runner.workarounds),
            next_step,
            runner.tokenizer is not None or runner.processor is not None,
        ),
    )
    return ExitCode.CLEAN if ok and not (strict_repair and repaired is not None) else ExitCode.FINDINGS


NO_TOKENIZER = "no tokenizer in the folder: each prompt's token ids were built from its UTF-8 bytes, within the config's vocabulary"


@dataclass(frozen=True)
class _Compared:
    """Both sides ran: their greedy outputs and, when they differ, why and the tensors behind it."""

    path: str
    model_class: str
    prompts: list
    images: Any
    a: list
    b: list
    name_a: str
    failure_text: str
    wrong: tuple
    report: Any
    repaired: Any
    workarounds: tuple
    next_step: str
    tokenizer: bool = True
    """False: the folder has no tokenizer; each prompt became token ids built from its bytes (``prompt_ids``)."""
    command = "compare"

    def document(self) -> dict:
        return {
            "model": self.path,
            "ok": not self.failure_text,
            "prompts": self.prompts,
            "a": [{"ids": ids, "text": text} for ids, text, _ in self.a],
            "b": [{"ids": ids, "text": text} for ids, text, _ in self.b],
            "failure": self.failure_text or None,
            "crash": None,
            "wrong_tensors": [f.to_dict() for f in self.wrong],
            "audit": self.report.to_dict() if self.report is not None else None,
            "repair": None
            if self.repaired is None
            else {"repaired": list(self.repaired.repaired), "ok": self.repaired.ok},
            "workarounds": [w.to_dict() for w in self.workarounds],
            "inputs": "tokenized" if self.tokenizer else NO_TOKENIZER,
        }

    def rows(self):
        from ..formats import RunFailure

        failure = (
            RunFailure("differ", f"greedy outputs differ from the reference's: {self.failure_text.splitlines()[0]}")
            if self.failure_text
            else None
        )
        return [run_row(self.path, "compare", self.model_class, failure=failure, findings=self.wrong)]

    def table(self, out, err) -> None:
        from rich.table import Table

        table = Table(header_style="bold")
        for column in ("prompt", f"A: {self.name_a}", "B: eager", "first divergence"):
            table.add_column(column, overflow="fold")
        for prompt, imgs, out_a, out_b in zip(self.prompts, self.images or [None] * len(self.prompts), self.a, self.b):
            label = prompt + (f" [{' + '.join(f'{i.width}x{i.height}' for i in imgs)}]" if imgs else "")
            divergence = next((i for i, (x, y) in enumerate(zip(out_a[0], out_b[0])) if x != y), None)
            shown_a, shown_b = (out_a[1], out_b[1]) if self.tokenizer else (str(out_a[0]), str(out_b[0]))
            table.add_row(label, shown_a, shown_b, "-" if divergence is None else f"token {divergence}")
        out.print(table)
        if not self.tokenizer:
            err.print(f"Note: {NO_TOKENIZER} (the table shows token ids)", highlight=False)
        if self.repaired is not None:
            out.print(f"repaired before generating: {', '.join(self.repaired.repaired)}", highlight=False)
        if not self.failure_text:
            out.print("agree (check_logprobs_close)", highlight=False)
            return
        out.print(styled("[bold red]differ[/]: {}", self.failure_text.splitlines()[0]), highlight=False)
        for line in self.failure_text.splitlines()[1:]:
            out.print(line, highlight=False, markup=False)
        if self.wrong:
            out.print("the load left these wrong:", highlight=False)
            for finding in self.wrong:
                out.print(f"  {finding.tensor} ({finding.status}): {finding.detail}", highlight=False, markup=False)
        else:
            out.print(
                "the audit finds no wrong tensor: the outputs differ for another reason (dtype, kernels, code the load ran)",
                highlight=False,
            )
        if self.repaired is None:
            err.print(
                styled("[bold]Hint:[/] to repair them in memory and compare again, run: {}", self.next_step),
                highlight=False,
            )
