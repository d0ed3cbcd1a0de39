"""The README's examples run exactly as written: every Python block, and every `loadguard` command line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from loadguard import zoo

from .conftest import IS_V5, TRANSFORMERS_VERSION

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
# a Python block the test runs is preceded by <!-- readme-test: path=ZOO_ENTRY -->: the model `path` names
PYTHON_BLOCKS = re.findall(r"<!-- readme-test: path=(\w+) -->\n```python\n(.*?)```", README, re.S)


def test_every_python_block_is_run():
    assert len(PYTHON_BLOCKS) == README.count("```python") == 4


@pytest.fixture(scope="module")
def engine_namespace(zoo_folder):
    """What the engine-suite example leaves to the reader: prompts, images and the engine's outputs."""
    from transformers import AutoProcessor

    from loadguard.runner import HfRunner, default_cases, eager_load

    folder = zoo_folder("minicpmv_like")
    prompts, images = default_cases(folder)
    engine = HfRunner.from_model(eager_load(folder, trust_remote_code=True, workarounds="auto"), AutoProcessor.from_pretrained(folder, trust_remote_code=True))
    return {"prompts": prompts, "images": images, "engine_outputs": engine.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)}


@pytest.mark.skipif(not IS_V5, reason=f"the examples audit loads that transformers {TRANSFORMERS_VERSION} does not break")
def test_python_blocks_run_as_written(zoo_folder, engine_namespace, capsys):
    """In order, in one session (as a reader pastes them), each with the model its marker names as ``path``."""
    namespace = dict(engine_namespace)
    for index, (entry, code) in enumerate(PYTHON_BLOCKS):
        namespace["path"] = str(zoo_folder(entry))
        exec(compile(code, f"README.md python block {index}", "exec"), namespace)
        if "loadguard.load(" in code:
            report = namespace["model"].loadguard_report
            repaired = namespace["model"].loadguard_repair
            assert (report.ok or repaired.ok) and (report.workarounds or entry == "np_buffer")
    assert all(len(ids) == 8 for ids, _, _ in namespace["hf_outputs"])


COMMANDS = [
    line.split("#")[0].strip()
    for block in re.findall(r"```bash\n(.*?)```", README, re.S)
    for line in block.splitlines()
    if line.startswith("loadguard ") and "./my-model" in line.split("#")[0] or line.startswith(("loadguard env", "loadguard zoo list"))
]


def test_the_command_lines_are_found():
    assert len(COMMANDS) >= 9 and COMMANDS[0] == "loadguard zoo build minicpmv_like ./my-model"


@pytest.mark.skipif(not IS_V5, reason=f"the commands audit loads that transformers {TRANSFORMERS_VERSION} does not break")
def test_command_lines_run_as_written(tmp_path, monkeypatch, capsys):
    """Each command, in order, in a fresh folder: exit codes as the README says."""
    from loadguard.cli import main

    monkeypatch.chdir(tmp_path)
    codes = {}
    for line in COMMANDS:
        with pytest.raises(SystemExit) as info:
            main(shlex.split(line)[1:])
        captured = capsys.readouterr()
        codes[line] = info.value.code
        assert "unexpected" not in captured.err and "Traceback" not in captured.err, (line, captured.err)
        if line == "loadguard audit ./my-model --trust-remote-code":
            first = zoo.get("minicpmv_like").needed_workarounds[0]  # what the v4-era code meets first on these versions
            assert f"Hint: known failure of code written for older transformers/torch: run again with --workaround {first}" in captured.err
    assert codes["loadguard zoo build minicpmv_like ./my-model"] == 0
    assert codes["loadguard audit ./my-model --trust-remote-code"] == 2
    assert codes["loadguard audit ./my-model --trust-remote-code --workaround auto"] == 1  # pos_embed, as loaded
    assert codes["loadguard compare ./my-model --trust-remote-code --workaround auto"] == 1
    assert codes["loadguard trace ./my-model --trust-remote-code --workaround auto"] == 1
    assert codes["loadguard env"] == 0 and codes["loadguard zoo list"] == 0
    assert zoo.entry_of(tmp_path / "my-model").name == "minicpmv_like"
