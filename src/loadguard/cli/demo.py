"""``loadguard demo``: the MiniCPM-V pos_embed story on the bundled zoo model, start to finish."""

from __future__ import annotations

import tempfile

import click

from ._common import ExitCode, quiet_transformers, stderr, stdout

MAX_NEW_TOKENS = 8


def _greedy(model, processor, cases) -> list[str]:
    import torch

    texts = []
    for prompt, images in cases:
        inputs = processor(text=prompt, images=images)
        inputs.pop("image_sizes", None)
        with torch.no_grad():
            ids = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, decode_text=False)
        texts.append(processor.tokenizer.decode(ids[0, inputs["input_ids"].shape[1] :]))
    return texts


@click.command()
@click.option("--poison/--no-poison", default=False, show_default=True, help="Load under loadguard.poison() (the garbage becomes NaN).")
def demo(poison):
    """Build a MiniCPM-V-shaped remote-code model, load it, find its broken pos_embed, repair it, prove it."""
    import contextlib

    import transformers
    from rich.rule import Rule
    from transformers import AutoModelForCausalLM, AutoProcessor

    from .. import audit, repair, zoo
    from ..poison import poison as poison_context
    from ..render import detail_lines, findings_table
    from ..zoo._images import demo_images

    quiet_transformers()
    out = stdout()
    entry = zoo.get("minicpmv_like")
    with tempfile.TemporaryDirectory(prefix="loadguard-demo-") as workdir:
        out.print(Rule("1. A remote-code vision-language model, shaped like MiniCPM-V 2.6"))
        path = zoo.build("minicpmv_like", f"{workdir}/minicpmv_like")
        fixed_path = zoo.build("minicpmv_like_fixed", f"{workdir}/minicpmv_like_fixed")
        out.print("Its resampler adds a 2D sin/cos table, [bold]pos_embed[/] (70x70x32), to the keys of its cross-attention.")
        out.print("The table is a non-persistent buffer computed in __init__; the model's _init_weights does not rebuild it.")

        out.print(Rule(f"2. Load it as everyone does (transformers {transformers.__version__})"))
        out.print(f'model = AutoModelForCausalLM.from_pretrained("{path.name}", trust_remote_code=True)', highlight=False)
        with poison_context() if poison else contextlib.nullcontext():
            model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=True)
        images = demo_images(entry.image_sizes)
        cases = [(entry.prompts[0], [image]) for image in images] + [(entry.prompts[1], images[:2])]

        out.print(Rule("3. loadguard.audit(model)"))
        report = audit(model)
        if report.ok:
            out.print(
                "[bold green]audit clean[/]: every tensor holds what its code and checkpoint define "
                f"(transformers {transformers.__version__} kept the buffer, or the memory it got happened to hold it: "
                "run with --poison to tell)"
            )
        else:
            out.print(findings_table(report.findings))
            for line in detail_lines(report.findings):
                out.print(line, highlight=False)
        broken_text = _greedy(model, processor, cases)

        out.print(Rule("4. loadguard.repair(model, report)"))
        result = repair(model, report)
        out.print(f"repaired: {', '.join(result.repaired) or 'nothing'}; re-audit: " + ("[bold green]clean[/]" if result.ok else "[bold red]still broken[/]"))
        repaired_text = _greedy(model, processor, cases)
        fixed_text = _greedy(AutoModelForCausalLM.from_pretrained(fixed_path, trust_remote_code=True), processor, cases)

        out.print(Rule(f"5. Greedy output, {MAX_NEW_TOKENS} tokens per prompt"))
        from rich.table import Table

        table = Table(header_style="bold")
        for column in ("prompt", "as loaded", "repaired", "fixed model"):
            table.add_column(column, overflow="fold")
        for (prompt, imgs), broken_row, repaired_row, fixed_row in zip(cases, broken_text, repaired_text, fixed_text):
            label = f"{prompt} [{' + '.join(f'{i.width}x{i.height}' for i in imgs)}]"
            style = "red" if broken_row != fixed_row else "green"
            table.add_row(label, f"[{style}]{broken_row}[/]", repaired_row, fixed_row)
        out.print(table)
        differing = sum(b != f for b, f in zip(broken_text, fixed_text))
        out.print(f"as loaded: {differing} of {len(cases)} outputs wrong; repaired: equal to the fixed model: {repaired_text == fixed_text}")

        out.print(Rule("6. Prevent it in one line"))
        out.print('model = loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True)', highlight=False)
        out.print("loads, audits, repairs and attaches the report (model.loadguard_report); on_problem='raise' fails instead.")
        if repaired_text != fixed_text or not result.ok:
            stderr().print("[bold red]Error:[/] the repaired model does not match the fixed model", highlight=False)
            return ExitCode.FINDINGS
    return ExitCode.CLEAN
