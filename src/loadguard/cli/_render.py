"""Turning reports into what people and machines read: a rich table, or stable JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

from .._infra import INDEX, Markup, collapse_names, styled
from ..report import AuditReport, Check, Finding, RepairResult, Status

_STATUS_STYLE = {
    Status.UNINITIALIZED: "bold red",
    Status.OVERWRITTEN: "bold red",
    Status.CRASHED: "bold red",
    Status.MISMATCH: "red",
    Status.ON_META: "bold magenta",
    Status.UNVERIFIABLE: "yellow",
    Status.INITIALIZED: "cyan",
}


def _grouped(findings: Iterable[Finding]) -> list[tuple[str, list[Finding]]]:
    """Findings that differ only by layer index, as one row each."""
    groups: dict[tuple, list[Finding]] = {}
    for finding in findings:
        key = (
            INDEX.sub("{}", finding.tensor),
            finding.kind,
            finding.check,
            finding.status,
            finding.dtype,
            finding.shape,
        )
        groups.setdefault(key, []).append(finding)
    return [(collapse_names(f.tensor for f in group)[0], group) for group in groups.values()]


def _diff(group: list[Finding]) -> str:
    values = [f.max_abs_diff for f in group if f.max_abs_diff is not None]
    if values:
        return f"{max(values):.3g}"
    return "n/a" if any(f.status not in (Status.UNVERIFIABLE, Status.INITIALIZED) for f in group) else ""


def findings_table(findings: Iterable[Finding], title: str | None = None) -> Table:
    """Findings as a table, layer indices collapsed; the details follow as lines (see :func:`detail_lines`)."""
    table = Table(title=title, show_lines=False, header_style="bold")
    for column in ("tensor", "kind", "check", "status", "dtype", "shape", "max |diff|"):
        table.add_column(column, overflow="fold")
    for name, group in _grouped(findings):
        first = group[0]
        kind = {"parameter": "parameter", "attribute": "attribute"}.get(first.kind) or (
            "buffer" if first.persistent else "np buffer"
        )
        style = _STATUS_STYLE.get(first.status)
        status = styled(f"[{style}]{{}}[/]", first.status) if style else first.status
        table.add_row(
            name, kind, first.check, status, first.dtype, "x".join(map(str, first.shape)) or "scalar", _diff(group)
        )
    return table


def detail_lines(findings: Iterable[Finding]) -> list[str]:
    """``name: detail`` per table row, then where in the code (``[at modeling_x.py:36]``) when it is known."""
    lines = []
    for name, group in _grouped(findings):
        where = f" [at {group[0].location}]" if group[0].location and group[0].location not in group[0].detail else ""
        lines.append(f"{name}: {group[0].detail}" + (f" (each of {len(group)})" if len(group) > 1 else "") + where)
    return lines


def check_lines(report: AuditReport) -> list[str]:
    """One summary line per check."""
    lines = []
    for summary in report.checks:
        if not summary.ran:
            lines.append(f"{summary.check:<22} not run: {summary.reason}")
            continue
        text = f"{summary.check:<22} {summary.checked} checked, {summary.failed} failed"
        if summary.initialized:
            text += f", {summary.initialized} initialized on request"
        if summary.unverifiable:
            text += f", {summary.unverifiable} unverifiable"
        if summary.reason:
            text += f" ({summary.reason})"
        lines.append(text)
    return lines


def workaround_line(outcome: dict[str, Any]) -> str:
    """One workaround outcome (its JSON form) as a report prints it."""
    line = f"workaround {outcome['name']} ({outcome['stage']}): {outcome['status']}" + (
        f", {outcome['detail']}" if outcome["detail"] else ""
    )
    return line + (f" ({outcome['auto']})" if outcome.get("auto") else "")


def print_report(console: Console, report: AuditReport, repair: RepairResult | None = None) -> None:
    verdict = (
        Markup("[bold green]clean[/]")
        if report.ok
        else styled("[bold red]{} tensor(s) wrong[/]", len(report.failures))
    )
    console.print(styled("[bold]{}[/] ({}): {}", report.model, report.model_class, verdict))
    if report.findings:
        console.print(findings_table(report.findings))
        for line in detail_lines(report.findings):
            console.print(line, highlight=False, markup=False)
    for line in check_lines(report):
        console.print(line, highlight=False)
    for outcome in report.workarounds:
        console.print(workaround_line(outcome.to_dict()), highlight=False, soft_wrap=True)
    if repair is not None:
        if repair.repaired:
            console.print(
                f"repaired {len(repair.repaired)}: {', '.join(collapse_names(repair.repaired))}", highlight=False
            )
        for item in repair.unrepaired:
            console.print(styled("[red]not repairable[/] {}: {}", item.tensor, item.reason), highlight=False)
        console.print(
            Markup("after repair: " + ("[bold green]clean[/]" if repair.ok else "[bold red]still broken[/]"))
        )


def report_json(report: AuditReport, repair: RepairResult | None = None, **extra: Any) -> str:
    """The CLI's JSON contract: the report's fields plus ``repair`` (null or repaired/ok/unrepaired)."""
    document = report.to_dict()
    document["repair"] = (
        None
        if repair is None
        else {
            "repaired": list(repair.repaired),
            "ok": repair.ok,
            "unrepaired": [u.to_dict() for u in repair.unrepaired],
            "findings_after": [f.to_dict() for f in repair.after.findings],
        }
    )
    document.update(extra)
    return json.dumps(document, indent=2)


def next_step(report: AuditReport, repaired: RepairResult | None) -> str | None:
    """The ``Hint:`` after an audit: what to do next."""
    if report.ok:
        return None
    names = ", ".join(collapse_names(f.tensor for f in report.failures)[:3])
    checks_hit = {f.check for f in report.failures}
    if repaired is None:
        return f"run again with --repair to see whether {names} can be repaired in memory"
    lasting = (
        "loadguard fix MODEL --out DIR --trust-remote-code writes and proves the lasting change to the model's code"
    )
    if not repaired.ok:
        return (
            "some tensors have no value anywhere: give them an _init_weights branch, or load a checkpoint that holds "
            f"them; {lasting}"
        )
    if checks_hit & {Check.NON_PERSISTENT_BUFFER.value, Check.META_LEFTOVER.value}:
        return f"load with loadguard.load(...) (on_problem='repair') for now; {lasting} (an _init_weights branch that rebuilds {names})"
    return f"load with loadguard.load(...) (on_problem='repair') for now; {lasting} (an _init_weights that leaves loaded weights alone)"
