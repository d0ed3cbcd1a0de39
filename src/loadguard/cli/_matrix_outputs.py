"""What ``loadguard matrix`` prints, as every format reads it: the cells (:class:`Cells`), a ``--diff`` (:class:`Changes`),
``--bisect`` (:class:`Bisections`), ``--native`` (:class:`NativeChanges`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .._infra import cell, code, styled
from ..report import CellStatus


def _cell_text(cell) -> str:
    from .._infra import collapse_names
    from ..report import failing as failing_findings

    if cell.status == CellStatus.UNAVAILABLE:
        return f"not installable here: {cell.error}"
    if cell.status == CellStatus.ERROR:
        return f"could not scan: {cell.error}"
    if cell.status == CellStatus.CLEAN:
        return "clean"
    failing = failing_findings(cell.report["findings"])
    names = collapse_names(f"{f['tensor']} ({f['status']})" for f in failing)
    if len(names) > 4:
        return ", ".join(names[:3]) + f" and {len(names) - 3} more ({len(failing)} tensors)"
    return ", ".join(names)


def matrix_markdown(matrix) -> str:
    header = "| model | " + " | ".join(f"transformers {v}" for v in matrix.versions) + " |"
    lines = [header, "|---" * (len(matrix.versions) + 1) + "|"]
    for model in matrix.models:
        lines.append(
            f"| {cell(model)} | " + " | ".join(cell(_cell_text(matrix.cell(model, v))) for v in matrix.versions) + " |"
        )
        for m, name, row in matrix.workaround_rows():
            if m == model:
                lines.append(
                    f"| ↳ workaround {code(name, table=True)} | "
                    + " | ".join(cell(row[v]) for v in matrix.versions)
                    + " |"
                )
    return "\n".join(lines)


def cell_row(cell, label: str):
    """One cell as a :class:`loadguard.formats.Row` named ``label`` (its folder kept, so locations resolve)."""
    from ..formats import Row

    if cell.report is None:
        row = Row.failed(cell.model, f"transformers {cell.transformers}: {cell.error}", cell.hint or None, "matrix")
    else:
        row = Row.from_scan({**cell.report, "model": cell.model, "scanned": True})
    return dataclasses.replace(row, model=label)


def cell_rows(result) -> list:
    """Every cell as a :class:`loadguard.formats.Row`, named ``MODEL @ transformers VERSION``."""
    return [cell_row(cell, f"{cell.model} @ transformers {cell.transformers}") for cell in result.cells]


def _environment_lines(result) -> list[str]:
    lines = []
    for environment in result.environments:
        state = "created" if environment.created else "cached"
        text = f"transformers {environment.version}: environment {state}" + (
            f" in {environment.seconds:.1f} s" if environment.created else ""
        )
        if not environment.ok:
            text += f"; not installable here: {environment.reason}"
        check = result.selfchecks.get(environment.version)
        if check is not None:
            if check.get("error"):
                text += f"; scan self-check could not run: {check['error']}"
            else:
                text += (
                    f"; scan self-check {'passed' if check['ok'] else 'FAILED: ' + '; '.join(check['differing'][:3])}"
                    + (" (recorded)" if check.get("cached") else f" ({check['seconds']:.1f} s)")
                )
        lines.append(text)
    return lines


@dataclass(frozen=True)
class Cells:
    result: Any
    command = "matrix"

    def document(self) -> dict:
        return self.result.to_dict()

    def markdown(self) -> str:
        return matrix_markdown(self.result)

    def rows(self) -> list:
        return cell_rows(self.result)

    def table(self, out, err) -> None:
        from rich.table import Table

        result = self.result
        table = Table(header_style="bold", title=f"loadguard matrix ({result.mode})")
        table.add_column("model", overflow="fold")
        for version in result.versions:
            table.add_column(f"transformers {version}", overflow="fold")
        for model in result.models:
            table.add_row(model, *(_cell_text(result.cell(model, v)) for v in result.versions))
            for m, name, row in result.workaround_rows():
                if m == model:
                    table.add_row(f"  ↳ workaround {name}", *(row[v] for v in result.versions))
        out.print(table)
        for line in _environment_lines(result):
            err.print(line, highlight=False)
        err.print(
            f"{len(result.cells)} cells in {result.seconds['cells']:.1f} s ({result.seconds['per_cell']:.2f} s per cell)",
            highlight=False,
        )


@dataclass(frozen=True)
class Changes:
    """``--diff A B``: how each model's verdict moved; for sarif, github and junit a model that got worse fails with
    its findings under B (or why it could not be checked there), any other model passes."""

    result: Any
    before: str
    after: str
    changes: tuple
    command = "matrix"

    def document(self) -> dict:
        return {
            "before": self.before,
            "after": self.after,
            "changes": [c.to_dict() for c in self.changes],
            "matrix": self.result.to_dict(),
        }

    def markdown(self) -> str:
        from .._matrix import changes_markdown

        return changes_markdown(self.changes)

    def rows(self) -> list:
        from ..formats import Row

        out = []
        for change in self.changes:
            label = f"{change.model}: {change.change} under transformers {self.after} (was: {change.before})"
            row = cell_row(self.result.cell(change.model, self.after), label)
            out.append(row if change.worse else Row(label, row.model_class, "matrix", row.folder))
        return out

    def table(self, out, err) -> None:
        from rich.table import Table

        table = Table(header_style="bold", title=f"transformers {self.before} -> {self.after}")
        for column in ("model", "change", f"transformers {self.before}", f"transformers {self.after}"):
            table.add_column(column, overflow="fold")
        for change in self.changes:
            table.add_row(
                change.model,
                styled("[red]{}[/]", change.change) if change.worse else change.change,
                change.before,
                change.after,
            )
        out.print(table)


@dataclass(frozen=True)
class Bisections:
    results: tuple
    command = "matrix"

    def document(self) -> dict:
        return {"bisections": [r.to_dict() for r in self.results]}

    def _lines(self) -> list[str]:
        lines = []
        for result in self.results:
            if result.first_changed is None:
                lines.append(
                    f"{result.model}: the same verdict from {result.low} to {result.high} ({len(result.cells)} of {result.candidates} versions run)"
                )
                continue
            before = next(c for c in result.cells if c.transformers == result.low).verdict()
            after = next(c for c in result.cells if c.transformers == result.first_changed).verdict()
            lines += [
                f"{result.model}: first changes at transformers {result.first_changed} ({len(result.cells)} of {result.candidates} versions run)",
                f"  {result.low}: {before}",
                f"  {result.first_changed}: {after}",
            ]  # a line a print: the console escapes newlines
        return lines

    def markdown(self) -> str:
        lines = ["| model | first changed | before | after |", "|---|---|---|---|"]
        for result in self.results:
            first = result.first_changed
            before = next(c for c in result.cells if c.transformers == result.low).verdict()
            after = next(c for c in result.cells if c.transformers == first).verdict() if first else before
            cells = [result.model, first or f"unchanged {result.low}..{result.high}", before, after]
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
        return "\n".join(lines)

    def table(self, out, err) -> None:
        for line in self._lines():
            out.print(line, highlight=False)


@dataclass(frozen=True)
class NativeChanges:
    diff: Any
    command = "matrix"

    def document(self) -> dict:
        return self.diff.to_dict()

    def markdown(self) -> str:
        from .._matrix import native as matrix_native

        return matrix_native.markdown(self.diff)

    def table(self, out, err) -> None:
        from rich.table import Table

        diff = self.diff
        table = Table(
            header_style="bold", title=f"classes whose verdict differs ({len(diff.changed)} of {len(diff.verdicts)})"
        )
        table.add_column("class", overflow="fold")
        for version in diff.versions:
            table.add_column(f"transformers {version}", overflow="fold")
        for label in diff.changed:
            table.add_row(label, *(diff.verdicts[label].get(v, "absent") for v in diff.versions))
        out.print(table)


__all__ = ["Bisections", "Cells", "Changes", "NativeChanges", "cell_rows"]
