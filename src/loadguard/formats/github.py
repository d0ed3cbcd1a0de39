"""GitHub Actions workflow commands: an ``::error`` annotation per failing tensor at the line of the model's code
behind it (file and line when that code is in the repository), one per model that could not be checked, and, when
``$GITHUB_STEP_SUMMARY`` is set, a Markdown summary appended to it."""

from __future__ import annotations

import os

from .._infra import cell, code, visible
from ._rows import Row


def _data(text: str) -> str:
    """A workflow command's message: control characters a model put there shown escaped, line breaks encoded, so the
    command is one line the model's text cannot end."""
    return visible(text, keep="\r\n").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _command(title: str, message: str, file: str | None = None, line: int | None = None) -> str:
    properties = (
        ([f"file={_property(file)}"] if file else [])
        + ([f"line={line}"] if file and line else [])
        + [f"title={_property(title)}"]
    )
    return f"::error {','.join(properties)}::{_data(message)}"


def summary(rows: list[Row], command: str) -> str:
    """The Markdown a job summary shows: a line per model."""
    lines = [f"### loadguard {command}", "", "| model | verdict | what is wrong |", "|---|---|---|"]
    for row in rows:
        if not row.checked:
            verdict = "could not check"
            what = cell(f"{row.error}" + (f" (Hint: {row.hint})" if row.hint else ""))
        else:
            verdict = (
                "clean"
                if row.ok
                else f"{row.run_failure.kind}, {len(row.failures)} wrong"
                if row.run_failure
                else f"{len(row.failures)} wrong"
            )
            what = (cell(f"{row.run_failure.message.splitlines()[0]}; ") if row.run_failure else "") + ", ".join(
                f"{code(f.tensor, table=True)} ({cell(f.status)})"
                + (f" at {code(f.location, table=True)}" if f.location else "")
                for f in row.failures[:8]
            )
            what += f" and {len(row.failures) - 8} more" if len(row.failures) > 8 else ""
        lines.append(f"| {cell(row.model)} | {cell(verdict)} | {what} |")
    return "\n".join(lines) + "\n"


def emit(rows: list[Row], *, command: str = "audit") -> str:
    out = []
    for row in rows:
        if not row.checked:
            out.append(
                _command(
                    f"loadguard: could not check {row.model}",
                    f"{row.error}" + (f"\nHint: {row.hint}" if row.hint else ""),
                )
            )
            continue
        for finding in row.failures:
            source = row.source(finding)
            file, line = (source[0], source[1]) if source and source[2] else (None, None)
            where = f" (made at {finding.location})" if finding.location and not file else ""
            out.append(
                _command(
                    f"loadguard: {finding.tensor} {finding.status}",
                    f"{row.model}: {finding.detail}{where}",
                    file,
                    line,
                )
            )
        if row.run_failure is not None:
            failure = row.run_failure
            source = row.source(failure)
            file, line = (source[0], source[1]) if source and source[2] else (None, None)
            where = f" (at {failure.location})" if failure.location and not file else ""
            out.append(
                _command(
                    f"loadguard {command}: {failure.tensor} {failure.kind}",
                    f"{row.model}: {failure.message}{where}",
                    file,
                    line,
                )
            )
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as stream:
            stream.write(summary(rows, command))
    return "\n".join(out)


__all__ = ["emit", "summary"]
