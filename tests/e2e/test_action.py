"""Where users wire loadguard in: the composite GitHub Action's step, run here as the runner would run it, and the
pre-commit hooks' definitions (their entry run in a model folder)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from ..conftest import IS_V5, TRANSFORMERS_VERSION

ROOT = Path(__file__).resolve().parents[2]
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())


def _step(tmp_path, **env):
    variables = {
        **os.environ,
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "LOADGUARD_SARIF": str(tmp_path / "loadguard.sarif"),
        **env,
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "github_action.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=variables,
        timeout=600,
    )


def test_the_action_runs_its_step_with_its_inputs():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    run = next(s for s in steps if s.get("id") == "loadguard")
    assert run["run"].endswith('/tools/github_action.py"') and (ROOT / "tools" / "github_action.py").is_file()
    used = set(re.findall(r"inputs\.([\w-]+)", (ROOT / "action.yml").read_text()))
    assert used <= set(action["inputs"]), used - set(action["inputs"])
    assert {v for k, v in run["env"].items()} == {
        f"${{{{ inputs.{name} }}}}" for name in ("models", "command", "args", "sarif", "fail-on-findings")
    }


@needs_v5
def test_the_action_step_annotates_uploads_and_summarises(tmp_path, zoo_folder):
    shutil.copytree(zoo_folder("np_buffer"), tmp_path / "broken")
    shutil.copytree(zoo_folder("clean"), tmp_path / "fine")
    done = _step(tmp_path, LOADGUARD_MODELS="broken\nfine", LOADGUARD_ARGS="--trust-remote-code")
    assert done.returncode == 1, done.stderr[-2000:]
    assert [line.split(",")[0] for line in done.stdout.splitlines()] == ["::error file=broken/modeling_lgtoy.py"] * 4
    sarif = json.loads((tmp_path / "loadguard.sarif").read_text())
    jsonschema.validate(sarif, SCHEMA)
    assert len(sarif["runs"][0]["results"]) == 4
    assert (
        "| broken | 4 wrong |" in (tmp_path / "summary.md").read_text()
        and "| fine | clean |" in (tmp_path / "summary.md").read_text()
    )
    assert (tmp_path / "output").read_text() == "exit-code=1\n"
    assert _step(tmp_path, LOADGUARD_MODELS="broken", LOADGUARD_FAIL_ON_FINDINGS="false").returncode == 0


def test_the_action_step_reports_a_model_it_cannot_check(tmp_path, zoo_folder):
    shutil.copytree(zoo_folder("clean"), tmp_path / "fine")
    done = _step(tmp_path, LOADGUARD_COMMAND="audit", LOADGUARD_MODELS="fine missing")
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.startswith("::error title=loadguard%3A could not check missing::")
    sarif = json.loads((tmp_path / "loadguard.sarif").read_text())
    jsonschema.validate(sarif, SCHEMA)
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False


@needs_v5
def test_the_actions_defaults_check_the_headline_v4_era_model(tmp_path, zoo_folder):
    """The MiniCPM-V-shaped model's code was written for transformers 4: the defaults apply its workarounds, so the
    step reports pos_embed (exit 1), not a NameError (exit 2)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    shutil.copytree(zoo_folder("minicpmv_like"), tmp_path / "minicpm")
    done = _step(tmp_path, LOADGUARD_MODELS="minicpm", LOADGUARD_ARGS=action["inputs"]["args"]["default"])
    assert done.returncode == 1 and "pos_embed" in done.stdout, done.stderr[-2000:]
    environ = {k: v for k, v in os.environ.items() if k != "LOADGUARD_ARGS"}
    variables = {**environ, "LOADGUARD_MODELS": "minicpm", "LOADGUARD_SARIF": str(tmp_path / "s.sarif")}
    unset = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "github_action.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=variables,
        timeout=600,
    )
    assert unset.returncode == 1, unset.stderr[-2000:]  # the script's own default is the action's


def test_the_pre_commit_hooks_name_real_flags_and_the_files_they_watch():
    from click import Context

    from loadguard.cli import cli

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert [h["id"] for h in hooks] == ["loadguard-scan", "loadguard-audit"]
    with Context(cli) as ctx:
        for hook in hooks:
            words = shlex.split(hook["entry"])
            assert words[:2] == ["loadguard", "hook"] and words[2] in ("scan", "audit")
            command = cli.get_command(ctx, words[2])
            options = {o for p in command.params for o in p.opts}
            assert hook["args"] == ["--trust-remote-code", "--workaround", "auto"] and all(
                w in options for w in hook["args"] if w.startswith("-")
            )
            assert hook.get("pass_filenames", True) is True  # the changed files name the model folders
            watched = re.compile(hook["files"])
            assert all(
                watched.search(f)
                for f in (
                    "config.json",
                    "modeling_lgtoy.py",
                    "sub/configuration_x.py",
                    "model.safetensors",
                    "model.safetensors.index.json",
                )
            )
            assert not any(watched.search(f) for f in ("README.md", "tokenizer.json", "train.py"))


@needs_v5
def test_the_scan_hook_entry_fails_a_broken_model_folder(tmp_path, zoo_folder):
    hook = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())[0]
    shutil.copytree(zoo_folder("np_buffer"), tmp_path / "repo" / "models" / "toy")
    (tmp_path / "repo" / "README.md").write_text("not a model")
    words = [
        *shlex.split(hook["entry"]),
        *hook["args"],
        "models/toy/modeling_lgtoy.py",
        "models/toy/config.json",
        "README.md",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", *words[1:]],
        cwd=tmp_path / "repo",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        done.returncode == 1 and "positions.index" in done.stdout and "models/toy" in done.stdout
    )  # one scan of the one folder
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", *words[1:3], *hook["args"], "README.md"],
        cwd=tmp_path / "repo",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "nothing to check" in done.stderr


def test_the_hook_takes_each_changed_file_to_its_model_folder(tmp_path):
    from loadguard.cli.hook import model_folders, split_files

    for folder in ("a", "b/c"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text("{}")
    (tmp_path / "b" / "c" / "sub").mkdir()
    (tmp_path / "b" / "c" / "sub" / "modeling_x.py").write_text("")
    (tmp_path / "loose.py").write_text("")
    files = [str(tmp_path / p) for p in ("a/config.json", "b/c/sub/modeling_x.py", "a/config.json", "loose.py")]
    assert model_folders(files, tmp_path) == ["a", "b/c"]
    assert split_files(("--trust-remote-code", "--workaround", "auto", *files)) == (
        ["--trust-remote-code", "--workaround", "auto"],
        files,
    )


@pytest.mark.slow
@needs_v5
def test_pre_commit_installs_the_hook_and_it_fails_a_broken_model_and_passes_a_clean_one(tmp_path, zoo_folder):
    """`pre-commit try-repo` as a model repository's maintainer runs it: pre-commit builds the hook's own environment
    (pip, with this project's constraints so torch stays the CPU build) and runs its entry in the repository."""
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed here: pip install -c constraints.txt -e '.[test]'")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PIP_CONSTRAINT": str(ROOT / "constraints.txt")}
    for name, expected, shown in (("np_buffer", 1, "positions.index"), ("clean", 0, "Passed")):
        repo = tmp_path / name
        shutil.copytree(zoo_folder(name), repo)
        for weights in repo.glob("*.safetensors"):  # the scan hook reads no weight: a repository without them
            weights.unlink()
        for command in (
            ["init", "-q"],
            ["add", "-A"],
            ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "model"],
        ):
            subprocess.run(["git", *command], cwd=repo, check=True, capture_output=True)
        done = subprocess.run(
            [pre_commit, "try-repo", str(ROOT), "loadguard-scan", "--all-files"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == expected and shown in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
