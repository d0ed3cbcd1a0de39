"""Every hint works when copied: each flag a hint names exists on the command it names, each command exists, and the
hints real runs print are run as printed."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import click
import pytest

import loadguard
from loadguard.cli import cli, main

from ..conftest import IS_V5, TRANSFORMERS_VERSION

SOURCE = Path(loadguard.__file__).parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND = re.compile(r"(?:^|['`(]|: |\brun |\btry |\bthen )loadguard ((?:--verbose )?[a-z]+(?: [a-z]+)?)([^'\"`();]*)")
PYTEST_FLAGS = {"--loadguard", "--loadguard-poison", "--loadguard-record", "--loadguard-workarounds-from"}


def _commands() -> dict[str, set[str]]:
    """Every command path (``scan``, ``zoo build``) and the options it takes."""
    found: dict[str, set[str]] = {}

    def visit(command: click.Command, path: str, ctx: click.Context):
        options = {
            opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")
        }
        options |= {"--help"}
        found[path] = options
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                visit(command.get_command(ctx, name), f"{path} {name}".strip(), ctx)

    with click.Context(cli) as ctx:
        visit(cli, "", ctx)
    return found


COMMANDS = _commands()
ROOT_OPTIONS = COMMANDS[""]


def _text(node: ast.AST) -> str:
    """A string node's text; an f-string's placeholders become ``X``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    return ""


def _strings(node: ast.AST) -> list[str]:
    return [t for child in ast.walk(node) if (t := _text(child))]


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _hints() -> list[tuple[str, str]]:
    """(where, text) of every hint the package can emit: the hint argument of an error, a class's ``hint``, what a
    ``*hint*`` function returns, every text printed after ``Hint:``, and the commands :func:`command_line` builds."""
    hints: list[tuple[str, str]] = []
    for file in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(file.read_text(), str(file))
        where = str(file.relative_to(SOURCE))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            found: list[str] = []
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name.endswith("Error") and len(node.args) >= 2:
                    found += _strings(node.args[1])
                found += [s for k in node.keywords if k.arg == "hint" for s in _strings(k.value)]
                if name == "command_line" and node.args and isinstance(node.args[0], ast.Constant):
                    extra = [s for k in node.keywords if k.arg == "extra" for s in _strings(k.value)]
                    found.append(f"loadguard {node.args[0].value} X {' '.join(extra)}")
            elif isinstance(node, ast.ClassDef):
                found += [
                    s
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "hint" for t in stmt.targets)
                    for s in _strings(stmt.value)
                ]
            elif isinstance(node, ast.FunctionDef) and "hint" in node.name:
                found += [
                    s
                    for stmt in ast.walk(node)
                    if isinstance(stmt, ast.Return) and stmt.value is not None
                    for s in _strings(stmt.value)
                ]
            elif isinstance(node, (ast.Constant, ast.JoinedStr)) and "Hint:" in _text(node):
                found.append(_text(node))
            hints += [(f"{where}:{getattr(node, 'lineno', 0)}", text) for text in found]
    return hints


HINTS = _hints()


def test_the_collector_finds_the_hints_we_know_of():
    texts = " ".join(text for _, text in HINTS)
    assert len(HINTS) > 60
    for known in ("--workaround", "--attn-implementation eager", "--repair", "--trust-remote-code", "--memory-limit"):
        assert known in texts, known


def test_every_flag_a_hint_names_exists():
    every = set().union(*COMMANDS.values()) | PYTEST_FLAGS
    unknown = [(where, flag, text) for where, text in HINTS for flag in FLAG.findall(text) if flag not in every]
    assert not unknown, unknown


def test_every_command_a_hint_names_exists_and_takes_its_flags():
    checked = 0
    problems = []
    for where, text in HINTS:
        for words, rest in COMMAND.findall(text):
            words = words.removeprefix("--verbose ")
            path = words if words in COMMANDS else words.split()[0]
            if path not in COMMANDS:
                problems.append((where, f"no command 'loadguard {words}'", text))
                continue
            checked += 1
            for flag in FLAG.findall(rest):
                if flag not in COMMANDS[path] | ROOT_OPTIONS:
                    problems.append((where, f"'loadguard {path}' has no {flag}", text))
    assert checked >= 15
    assert not problems, problems


def test_a_wrong_hint_is_caught():
    """The checks can fail: a hint naming a flag no command has, or a command that does not exist."""
    every = set().union(*COMMANDS.values()) | PYTEST_FLAGS
    assert "--workarounds" not in every  # the spelling users were told before: the option is --workaround
    words, rest = COMMAND.findall("run 'loadguard audit X --bisect'")[0]
    assert "--bisect" not in COMMANDS[words.split()[0]]
    assert "verify" not in COMMANDS


@pytest.fixture
def cli_run(capsys):
    def invoke(*args: str):
        with pytest.raises(SystemExit) as info:
            main(list(args))
        captured = capsys.readouterr()
        return info.value.code, captured.out, captured.err

    return invoke


@pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads: no hint to run"
)
@pytest.mark.parametrize(
    ("name", "command", "expected"),
    [
        (
            "np_buffer",
            ["audit"],
            0,
        ),  # audit's hint: run again with --repair: every finding repaired, the re-audit clean
        ("np_buffer", ["compare"], 0),  # compare's hint: ... run: loadguard compare ... --repair
        (
            "tensor_attribute",
            ["trace"],
            0,
        ),  # trace's hint: ... shown by: loadguard audit ... --repair: repaired, the re-audit clean
        ("v4_attn_mask", ["audit"], None),  # a failing import: its hint names --workaround NAME
    ],
)
def test_printed_hints_run_as_printed(cli_run, zoo_folder, name, command, expected):
    folder = str(zoo_folder(name))
    code, out, err = cli_run(*command, folder, "--trust-remote-code")
    hint = next(line for line in err.splitlines() if line.startswith("Hint:"))
    if "run: loadguard " in hint or ": loadguard " in hint:  # the command ends the hint, one shlex.join, unquoted
        words = shlex.split(hint.split(": loadguard ", 1)[1])
    elif "run again with" in hint:  # '... run again with --repair' / '--workaround NAME (or --workaround auto)'
        flags = hint.split("run again with", 1)[1].split(" (or ")[0].split(" to ")[0]
        words = [*command, folder, "--trust-remote-code", *shlex.split(flags)]
    else:
        pytest.fail(f"a hint with nothing to run: {hint}")
    again, out, err = cli_run(*words)
    assert again != 2, (words, err)
    if expected is not None:
        assert again == expected, (words, out, err)
