"""The first hour, round 2 (issue 36): one meaning per word, exit codes that match the ecosystem's, a CLI that answers at
once, help and messages shown as written."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from loadguard.cli import cli

from ..conftest import IS_V5, TRANSFORMERS_VERSION, run_cli

pytest_plugins = ["pytester"]
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")

# -- a CLI that answers at once ----------------------------------------------------------------------------------------

PROBE = """
import json, sys
from loadguard.cli import main
try:
    main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": int(code or 0), "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}), file=sys.stderr)
"""


def _probe(tmp_path, *args, env=None):
    import os

    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), **(env or {})},
    )
    return json.loads(result.stderr.strip().splitlines()[-1]), result.stdout, result.stderr


@pytest.mark.parametrize(
    "args, code",
    [
        (["--help"], 0),
        ([], 0),
        (["audit", "--help"], 0),
        (["env", "--help"], 0),
        (["zoo"], 0),
        (["scna"], 2),
        (["audit", "--formt", "json", "x"], 2),
        (["audit", "/nonexistent/model"], 2),
        (["audit", "/nonexistent/model", "--format", "json"], 2),
        (["compare", "/nonexistent/model"], 2),
        (["trace", "/nonexistent/model"], 2),
        (["scan", "/nonexistent/model"], 2),
        (["fix", "/nonexistent/model", "--out", "fixed"], 2),
        (["audit", "org/not-cached"], 2),
        (["scan", "org/not-cached"], 2),
        (["fix", "org/not-cached", "--out", "fixed"], 2),
        (["config"], 0),
    ],
)
def test_help_usage_errors_and_missing_models_answer_before_torch_is_imported(tmp_path, args, code):
    seen, out, err = _probe(tmp_path, *args)
    assert seen == {"code": code, "torch": False, "transformers": False}, err


def test_a_mistyped_subcommand_gets_did_you_mean(capsys):
    code, out, err = run_cli(capsys, "scna", "x")
    assert code == 2 and "no such command 'scna'. Did you mean 'scan'?" in err
    code, out, err = run_cli(capsys, "zoo", "lst")
    assert code == 2 and "Did you mean 'list'?" in err


# -- text shown as written ---------------------------------------------------------------------------------------------


def _commands():
    with click.Context(cli) as ctx:
        for name in cli.list_commands(ctx):
            command = cli.get_command(ctx, name)
            yield [name], command
            if isinstance(command, click.Group):
                with click.Context(command, info_name=name, parent=ctx) as sub:
                    for child in command.list_commands(sub):
                        yield [name, child], command.get_command(sub, child)


@pytest.mark.parametrize("words", [w for w, _ in _commands()], ids=" ".join)
def test_every_commands_help_shows_every_word_click_wrote(capsys, words):
    """The help as printed holds every word of the help click renders: option choices, [default: ...] and the
    [tool.loadguard] of a docstring survive."""
    from click.testing import CliRunner

    code, out, err = run_cli(capsys, *words, "--help")
    assert code == 0, err
    expected = CliRunner().invoke(cli, [*words, "--help"], prog_name="loadguard").output  # as click renders it
    assert out.split() == expected.split()


def test_a_bare_group_prints_its_help_whole(capsys):
    for words in ([], ["zoo"], ["workarounds"]):
        code, bare, err = run_cli(capsys, *words)
        code_help, helped, _ = run_cli(capsys, *words, "--help")
        assert code == code_help == 0 and bare == helped and "[OPTIONS]" in bare, err


def test_brackets_in_text_are_text(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "config")
    assert code == 0 and "(no [tool.loadguard] table found: defaults)" in out
    code, out, err = run_cli(capsys, "audit", str(tmp_path / "model[red]v2[/red]"))
    assert code == 2 and "model[red]v2[/red] does not exist" in err


# -- one meaning per word ----------------------------------------------------------------------------------------------


@needs_v5
def test_the_plugin_and_the_cli_say_the_same_of_one_load(pytester, zoo_folder, capsys):
    """Same load, same evidence: the status word and the line of code the CLI reports are in the plugin's failure (no
    poison flag given: audited loads are poisoned by default, as the CLI's), which ends with the command that
    reproduces it."""
    folder = str(zoo_folder("np_buffer"))
    code, out, err = run_cli(capsys, "audit", folder, "--trust-remote-code", "--format", "json")
    cli = {
        f["tensor"]: (f["status"], f["location"]) for f in json.loads(out)["findings"] if f["status"] != "initialized"
    }
    assert code == 1 and cli["positions.index"][0] == "uninitialized" and cli["positions.index"][1]
    pytester.makepyfile(
        test_load=f"""
        def test_it():
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained({folder!r}, trust_remote_code=True)
        """
    )
    result = pytester.runpytest_subprocess("--loadguard=fail", "-rN", "-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    for tensor, (status, location) in cli.items():
        assert f"{tensor} ({status} at {location})" in text, tensor
    assert f"Reproduce: loadguard audit {folder} --trust-remote-code" in text


@needs_v5
def test_the_report_a_user_is_handed_describes_the_model_they_hold(zoo_folder):
    import loadguard

    model = loadguard.load("AutoModelForCausalLM", zoo_folder("np_buffer"), trust_remote_code=True, poison=True)
    assert model.loadguard_report.ok and "repaired by loadguard.repair" in model.loadguard_report.method
    assert not model.loadguard_report_as_loaded.ok and model.loadguard_repair.ok
    assert loadguard.audit(model).ok  # a fresh audit says what the attached report says


def test_matrix_help_and_the_docs_give_one_exit_code_for_a_model_that_could_not_be_scanned(capsys):
    from pathlib import Path

    from loadguard._matrix.matrices import Cell
    from loadguard.cli.matrix import cells_exit

    clean, error = Cell("a", "5.0", "clean", {"findings": [], "workarounds": []}), Cell("b", "5.0", "error", error="x")
    assert cells_exit([clean, error]) == 3 and cells_exit([error]) == 2 and cells_exit([clean]) == 0
    code, out, _ = run_cli(capsys, "matrix", "--help")
    assert "3: partial" in " ".join(out.split())
    root = Path(__file__).resolve().parents[2]
    assert (
        "| 3 | partial: a fleet or matrix where some models could not be checked"
        in (root / "docs" / "findings.md").read_text()
    )


def test_the_pytest_mode_table_ends_where_its_rows_end():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "pytest.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(line.rstrip().endswith("|") and line.count("|") == 5 for line in rows), rows


def test_an_audit_says_nothing_of_a_comparison_that_did_not_happen(zoo_folder):
    from transformers import AutoModelForCausalLM

    import loadguard

    model = AutoModelForCausalLM.from_pretrained(zoo_folder("clean"), trust_remote_code=True)
    reason = loadguard.audit(model).summary("checkpoint_fidelity").reason
    assert "the rest compared" not in reason
    if "proven unmodified" in reason:
        assert reason.startswith("all ") or "the other" in reason
