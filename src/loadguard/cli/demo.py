"""``loadguard demo``: the MiniCPM-V pos_embed story on the bundled zoo model, start to finish."""

from __future__ import annotations

import tempfile

import click

from .._infra import Markup, styled
from ..errors import LoadguardError, hint_for
from ._common import ExitCode, quiet_transformers
from ._consoles import stderr, stdout

RULE_WIDTH = 100
"""Section rules span a terminal, at most this many columns (never the unbounded width of a log)."""

MAX_NEW_TOKENS = 8


def _greedy(model, processor, cases) -> list[str]:
    """Greedy text per case through the reference runner (which adapts MiniCPM-V's generate)."""
    from ..runner import HfRunner

    runner = HfRunner.from_model(model, processor)
    prompts = [prompt for prompt, _ in cases]
    return [
        text for _, text in runner.generate_greedy(prompts, MAX_NEW_TOKENS, images=[images for _, images in cases])
    ]


@click.command()
@click.option(
    "--poison/--no-poison",
    default=True,
    show_default=True,
    help="Load under loadguard.poison(): the garbage becomes NaN, every run the same (--no-poison: whatever memory the load gets).",
)
def demo(poison):
    """Build a MiniCPM-V-shaped remote-code model, load it, find its broken pos_embed, repair it, prove it."""
    import transformers
    from rich.rule import Rule
    from rich.table import Table
    from transformers import AutoModelForCausalLM, AutoProcessor

    from .. import _hf, zoo
    from .._audit import audit, load_unaudited, repair
    from ..zoo import demo_images
    from ._render import detail_lines, findings_table

    quiet_transformers()
    out = stdout()
    entry = zoo.get("minicpmv_like")
    with tempfile.TemporaryDirectory(prefix="loadguard-demo-") as workdir:
        out.print(
            Rule("1. A remote-code vision-language model, shaped like MiniCPM-V 2.6"), width=min(out.width, RULE_WIDTH)
        )
        path = zoo.build("minicpmv_like", f"{workdir}/minicpmv_like")
        fixed_path = zoo.build("minicpmv_like_fixed", f"{workdir}/minicpmv_like_fixed")
        out.print(
            Markup(
                "Its resampler adds a 2D sin/cos table, [bold]pos_embed[/] (70x70x32), to the keys of its cross-attention."
            )
        )
        out.print(
            "The table is a non-persistent buffer computed in __init__; the model's _init_weights does not rebuild it."
        )
        out.print("Like the real one, its code was written for transformers 4.")

        out.print(
            Rule(f"2. Load it as everyone does (transformers {transformers.__version__})"),
            width=min(out.width, RULE_WIDTH),
        )
        out.print(
            f'model = AutoModelForCausalLM.from_pretrained("{path.name}", trust_remote_code=True)', highlight=False
        )
        try:
            AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
            out.print("it imports and constructs on this transformers")
        except Exception as error:  # what a user sees first, then what loadguard makes of it
            translated = _hf.translate(error, path)
            out.print(styled("[bold red]{}[/]: {}", type(error).__name__, str(error).splitlines()[0]), highlight=False)
            out.print(f"loadguard: {translated.message}", highlight=False)
            out.print(f"Hint: {hint_for(translated, 'cli')}", highlight=False)
        out.print(
            'loadguard.load(..., workarounds="auto") applies the workarounds whose failure the load hits, and says so:'
        )
        try:
            model, outcomes = load_unaudited(
                AutoModelForCausalLM, path, poison=poison, workarounds="auto", trust_remote_code=True
            )
            fixed_model, _ = load_unaudited(
                AutoModelForCausalLM, fixed_path, workarounds="auto", trust_remote_code=True
            )
        except LoadguardError as error:
            stderr().print(styled("[bold red]Error:[/] {}", error.message), highlight=False)
            stderr().print(styled("[bold]Hint:[/] {}", hint_for(error, "cli")), highlight=False)
            return ExitCode.COULD_NOT_RUN
        for outcome in outcomes:
            out.print(
                f"  workaround {outcome.name}: {outcome.status} ({outcome.auto or outcome.detail})", highlight=False
            )
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=True)
        images = demo_images(entry.image_sizes)
        cases = [(entry.prompts[0], [image]) for image in images] + [(entry.prompts[1], images[:2])]

        out.print(Rule("3. loadguard.audit(model)"), width=min(out.width, RULE_WIDTH))
        report = audit(model)
        if report.ok:
            out.print(
                styled(
                    "[bold green]audit clean[/]: every tensor holds what its code and checkpoint define "
                    "(transformers {} kept the buffer, or the memory it got happened to hold it: run without --no-poison to tell)",
                    transformers.__version__,
                )
            )
        else:
            out.print(findings_table(report.findings))
            for line in detail_lines(report.findings):
                out.print(line, highlight=False, markup=False)
        broken_text = _greedy(model, processor, cases)

        out.print(Rule("4. loadguard.repair(model, report)"), width=min(out.width, RULE_WIDTH))
        result = repair(model, report)
        out.print(
            styled(
                "repaired: {}; re-audit: {}",
                ", ".join(result.repaired) or "nothing",
                Markup("[bold green]clean[/]" if result.ok else "[bold red]still broken[/]"),
            )
        )
        repaired_text = _greedy(model, processor, cases)
        fixed_text = _greedy(fixed_model, processor, cases)

        out.print(Rule(f"5. Greedy output, {MAX_NEW_TOKENS} tokens per prompt"), width=min(out.width, RULE_WIDTH))
        table = Table(header_style="bold")
        for column in ("prompt", "as loaded", "repaired", "fixed model"):
            table.add_column(column, overflow="fold")
        for (prompt, imgs), broken_row, repaired_row, fixed_row in zip(cases, broken_text, repaired_text, fixed_text):
            label = f"{prompt} [{' + '.join(f'{i.width}x{i.height}' for i in imgs)}]"
            style = "red" if broken_row != fixed_row else "green"
            table.add_row(label, styled(f"[{style}]{{}}[/]", broken_row), repaired_row, fixed_row)
        out.print(table)
        differing = sum(b != f for b, f in zip(broken_text, fixed_text))
        out.print(
            f"as loaded: {differing} of {len(cases)} outputs wrong; repaired: equal to the fixed model: {repaired_text == fixed_text}"
        )

        out.print(Rule("6. Prevent it in one line"), width=min(out.width, RULE_WIDTH))
        out.print(
            'model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True, workarounds="auto")',
            highlight=False,
        )
        out.print(
            "loads, audits, repairs and attaches the report (model.loadguard_report); on_problem='raise' fails instead."
        )
        if repaired_text != fixed_text or not result.ok:
            stderr().print(
                Markup("[bold red]Error:[/] the repaired model does not match the fixed model"), highlight=False
            )
            return ExitCode.FINDINGS
    return ExitCode.CLEAN
