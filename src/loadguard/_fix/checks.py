"""What ``loadguard fix`` checks before it calls a patch fixed, without running the model: the patched files have no
pyflakes finding the original lacks (lint parity: a name left undefined on a path no proof runs), they compile on every
Python loadguard supports, and the diff it hands over applies to the original files as ``git apply`` and ``patch -p1``
read it. Each is a :class:`~loadguard._fix.proofs.Proof` row with its evidence; the fourth check, that the copy saves
and reloads, needs a load and runs in proof (a)'s process (:mod:`loadguard._fix.proofs`)."""

from __future__ import annotations

import ast
import collections
import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pyflakes import checker

from .proofs import Proof

OLDEST_PYTHON = (3, 10)
"""The oldest Python loadguard supports (pyproject.toml's requires-python): the patched files must compile there too."""


def _python(files: dict[str, str]) -> dict[str, str]:
    return {name: text for name, text in files.items() if name.endswith(".py")}


def _findings(name: str, text: str) -> collections.Counter:
    """pyflakes' findings of one file, by kind and what they name (not by line: an edit moves lines)."""
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError:
        return collections.Counter()  # said by the compile check
    found = collections.Counter(_key(message) for message in checker.Checker(tree, filename=name).messages)
    for key in [k for k in found if k[0] == "ImportStar"]:  # one star import, said once or twice: one finding
        found[key] = 1
    return found


def _key(message) -> tuple[str, tuple[str, ...]]:
    """What a finding is about. A star import is one finding whether pyflakes calls it used (a name it may give) or
    unused (the patch defined that name, ``from typing import List``): the import itself is the original's."""
    kind, args = type(message).__name__, tuple(str(a) for a in message.message_args)
    if kind == "UnusedImport" and args and args[0].endswith(".*"):
        return "ImportStar", (args[0][:-2],)
    if kind == "ImportStarUsed":
        return "ImportStar", args
    return kind, args


def _described(kind: str, args: tuple[str, ...], name: str, text: str) -> str:
    found = next(
        (
            m
            for m in checker.Checker(ast.parse(text, filename=name), filename=name).messages
            if _key(m) == (kind, args)
        ),
        None,
    )
    if found is None:
        return f"{name}: {kind} {', '.join(args)}"
    return f"{name}:{found.lineno}: {found.message % found.message_args}"


def lint_parity(original: dict[str, str], patched: dict[str, str]) -> Proof:
    """Every patched Python file against its original: a pyflakes finding the patch introduced (an undefined name, a
    redefinition, an unused import) fails the check, whether or not any proof runs that line."""
    new: list[str] = []
    checked = 0
    for name, text in sorted(_python(patched).items()):
        checked += 1
        before, after = _findings(name, original.get(name, "")), _findings(name, text)
        for (kind, args), count in sorted((after - before).items()):
            new += [_described(kind, args, name, text)] * count
    if new:
        return Proof(
            "lint_parity",
            "",
            False,
            f"the patch introduces {len(new)} pyflakes finding(s) the original lacks: {'; '.join(new[:6])}"
            + (" ..." if len(new) > 6 else ""),
        )
    return Proof(
        "lint_parity", "", True, f"{checked} patched file(s): no pyflakes finding the original lacks (pyflakes)"
    )


def _newer_syntax(text: str) -> str | None:
    """What an f-string of ``text`` needs Python 3.12 for (PEP 701: its own quote or a backslash inside a replacement
    field), or None."""
    import libcst as cst

    class Finder(cst.CSTVisitor):
        found: str | None = None

        def visit_FormattedString(self, node: cst.FormattedString) -> None:
            quote = node.start.lstrip("rRfFbBuU")
            for part in node.parts:
                if isinstance(part, cst.FormattedStringExpression):
                    code = cst.Module(body=[]).code_for_node(part.expression)
                    if quote in code or "\\" in code:
                        self.found = self.found or f"an f-string reuses its quote or a backslash inside {{{code}}}"

    finder = Finder()
    try:
        cst.parse_module(text).visit(finder)
    except cst.ParserSyntaxError:
        return None
    return finder.found


def compiles(patched: dict[str, str]) -> Proof:
    """Every patched Python file compiles on this Python and parses with the grammar of each Python from the oldest
    loadguard supports on (``ast.parse(feature_version=...)``, and PEP 701's f-strings looked for by hand: before 3.12
    a replacement field may not reuse its string's quote)."""
    here = sys.version_info[:2]
    versions = [(3, minor) for minor in range(OLDEST_PYTHON[1], here[1] + 1)]
    problems = []
    for name, text in sorted(_python(patched).items()):
        try:
            compile(text, name, "exec", dont_inherit=True)
        except SyntaxError as error:
            problems.append(f"{name}:{error.lineno}: {error.msg} (Python {here[0]}.{here[1]})")
            continue
        for version in versions:
            try:
                ast.parse(text, filename=name, feature_version=version)
            except SyntaxError as error:
                problems.append(f"{name}:{error.lineno}: {error.msg} (Python {version[0]}.{version[1]})")
                break
        newer = _newer_syntax(text)
        if newer:
            problems.append(f"{name}: {newer} (Python 3.12 and later only)")
    spoken = ", ".join(f"{a}.{b}" for a, b in versions)
    if problems:
        return Proof("compiles", "", False, f"the patched code does not compile everywhere: {'; '.join(problems[:4])}")
    return Proof("compiles", "", True, f"{len(_python(patched))} patched file(s) compile on Python {spoken}")


def _tool(command: list[str], cwd: Path, diff: str) -> tuple[bool | None, str]:
    if shutil.which(command[0]) is None:
        return None, f"{command[0]} is not installed here"
    try:
        done = subprocess.run(command, cwd=cwd, input=diff, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"{command[0]} could not run ({error})"
    said = (done.stderr or done.stdout).strip().splitlines()
    return done.returncode == 0, said[-1][:200] if said else ""


def diff_applies(original: dict[str, str], diff: str) -> Proof:
    """The diff against a copy of the original files, as the maintainer applies it: ``git apply --check`` and ``patch -p1
    --dry-run`` (each where installed; neither: not run)."""
    if not diff:
        return Proof("diff_applies", "", True, "no change to apply")
    with tempfile.TemporaryDirectory(prefix="loadguard-diff-") as folder:
        root = Path(folder)
        for name, text in original.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(text.encode("utf-8"))
        git = _tool(["git", "apply", "--check", "--verbose", "-"], root, diff)
        patch = _tool(["patch", "-p1", "--dry-run", "--batch", "--silent"], root, diff)
    results = {"git apply --check": git, "patch -p1 --dry-run": patch}
    failed = [f"{tool}: {said}" for tool, (ok, said) in results.items() if ok is False]
    ran = [tool for tool, (ok, _) in results.items() if ok is not None]
    if failed:
        return Proof("diff_applies", "", False, f"the diff does not apply to the original files ({'; '.join(failed)})")
    if not ran:
        return Proof("diff_applies", "", None, "not run: neither git nor patch is installed here")
    skipped = [f"{tool} not run: {said}" for tool, (ok, said) in results.items() if ok is None]
    return Proof(
        "diff_applies",
        "",
        True,
        f"applies to the original files with {' and '.join(ran)}" + (f" ({'; '.join(skipped)})" if skipped else ""),
    )


def static_checks(original: dict[str, str], patched: dict[str, str], diff: str) -> tuple[Proof, ...]:
    """The three checks that need no model run, in the order a reviewer meets what they catch."""
    return diff_applies(original, diff), compiles(patched), lint_parity(original, patched)


__all__ = ["NO_NEWLINE", "OLDEST_PYTHON", "compiles", "diff_applies", "diff_of", "lint_parity", "static_checks"]


NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(text: str) -> list[str]:
    """The lines of a file as git and patch count them: split at ``\\n`` only (``str.splitlines`` also splits at a form
    feed or a Unicode line separator, which a diff of them would misplace)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def diff_of(original: dict[str, str], patched: dict[str, str]) -> str:
    """A unified diff ``git apply`` and ``patch -p1`` take: a last line without its newline is marked as diff marks it
    (difflib leaves it bare, which both tools call a corrupt or malformed patch)."""
    parts = []
    for name in sorted(patched):
        end = "\t" if any(c.isspace() for c in name) else ""  # patch and git apply read a name up to a tab
        for line in difflib.unified_diff(
            _lines(original[name]), _lines(patched[name]), f"a/{name}{end}", f"b/{name}{end}"
        ):
            parts.append(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}")
    return "".join(parts)
