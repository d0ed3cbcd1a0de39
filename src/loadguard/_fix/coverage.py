"""How far the proofs of ``loadguard fix`` reached: the lines of the patched files that ran while proof (a)'s process
loaded, audited and ran the copy (traced with ``sys.settrace``), and the statements the change added that none of
them ran, said in the output and the pull request's text."""

from __future__ import annotations

import os
import sys


class LinesRun:
    """The lines of the patched files that run while a proof runs, as ``sys.settrace`` sees them: only frames of files
    transformers copied into its modules cache under one of ``names`` are traced line by line (every other frame pays
    one call check). ``lines``: file name -> line numbers."""

    def __init__(self, names: set[str]):
        self.names = names
        self.lines: dict[str, set[int]] = {}

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines.setdefault(os.path.basename(frame.f_code.co_filename), set()).add(frame.f_lineno)
        return self._local

    def _global(self, frame, event, arg):
        filename = frame.f_code.co_filename
        if "transformers_modules" in filename and os.path.basename(filename) in self.names:
            return self._local
        return None

    def __enter__(self) -> LinesRun:
        self.previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self.previous)

    def to_dict(self) -> dict[str, list[int]]:
        return {name: sorted(lines) for name, lines in self.lines.items()}


def added_lines(diff: str) -> dict[str, set[int]]:
    """The lines a unified diff adds, by file name, numbered as in the new file."""
    added: dict[str, set[int]] = {}
    name, line = "", 0
    for text in diff.split("\n"):
        if text.startswith("+++ "):
            name = text[4:].split("\t")[0].removeprefix("b/")
        elif text.startswith("@@"):
            line = int(text.split("+")[1].split(",")[0].split(" ")[0])
        elif text.startswith("+"):
            added.setdefault(name, set()).add(line)
            line += 1
        elif text.startswith(" "):
            line += 1
    return added


def _executable(text: str, name: str) -> set[int]:
    """The lines of a file that run as statements (what a line tracer can see run)."""
    lines: set[int] = set()
    pending = [compile(text, name, "exec", dont_inherit=True)]
    while pending:
        code = pending.pop()
        lines |= {line for _, _, line in code.co_lines() if line is not None}
        pending += [c for c in code.co_consts if hasattr(c, "co_lines")]
    return lines


def not_run(diff: str, patched: dict[str, str], ran: dict[str, list[int]]) -> tuple[str, ...]:
    """The statements the change added that no proof ran, as ``file:line`` or ``file:first-last`` spans; the lines that
    only define (a ``def``, a class body's assignment) count as run when their module was imported."""
    out: list[str] = []
    for name, lines in sorted(added_lines(diff).items()):
        if not name.endswith(".py") or name not in patched:
            continue
        try:
            executable = _executable(patched[name], name)
        except SyntaxError:
            continue
        seen = set(ran.get(name, ()))
        missed = sorted(line for line in lines & executable if line not in seen)
        spans: list[list[int]] = []
        for line in missed:
            if spans and line == spans[-1][1] + 1:
                spans[-1][1] = line
            else:
                spans.append([line, line])
        out += [f"{name}:{a}" if a == b else f"{name}:{a}-{b}" for a, b in spans]
    return tuple(out)


__all__ = ["LinesRun", "added_lines", "not_run"]
