"""The README's examples run exactly as written: every Python block, and every `loadguard` command line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from loadguard import zoo

from ..conftest import IS_V5, TRANSFORMERS_VERSION

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PAGES = [
    "audit",
    "fix",
    "pytest",
    "workarounds",
    "scan",
    "hub",
    "matrix",
    "ray",
    "findings",
    "trust",
    "zoo",
    "contributing",
    "architecture",
]
DOCS = README + "".join((ROOT / "docs" / f"{page}.md").read_text() for page in PAGES)  # in reading order
# a Python block the test runs is preceded by <!-- readme-test: path=ZOO_ENTRY -->: the model `path` names
PYTHON_BLOCKS = re.findall(r"<!-- readme-test: path=(\w+) -->\n```python\n(.*?)```", DOCS, re.S)


def test_the_readme_is_short_and_links_every_page():
    assert len(README.encode()) <= 8 * 1024
    for page in PAGES:
        assert f"](docs/{page}.md)" in README, page
    assert sorted(p.stem for p in (ROOT / "docs").glob("*.md")) == sorted(PAGES)


def test_every_python_block_is_run():
    # a text quoted whole in a ````markdown block (a PR description as fix writes it) holds its own fences: not ours
    ours = re.sub(r"````markdown\n.*?\n````", "", DOCS, flags=re.S)
    assert len(PYTHON_BLOCKS) == ours.count("```python") == 5


@pytest.fixture(scope="module")
def engine_namespace(zoo_folder):
    """What the engine-suite example leaves to the reader: prompts, images and the engine's outputs."""
    from transformers import AutoProcessor

    from loadguard.runner import HfRunner, default_cases, eager_load

    folder = zoo_folder("minicpmv_like")
    prompts, images = default_cases(folder)
    engine = HfRunner.from_model(
        eager_load(folder, trust_remote_code=True, workarounds="auto"),
        AutoProcessor.from_pretrained(folder, trust_remote_code=True),
    )
    return {
        "prompts": prompts,
        "images": images,
        "engine_outputs": engine.generate_greedy_logprobs_limit(prompts, 8, 5, images=images),
    }


@pytest.mark.skipif(
    not IS_V5, reason=f"the examples audit loads that transformers {TRANSFORMERS_VERSION} does not break"
)
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


BASH = [
    line for block in re.findall(r"```bash\n(.*?)```", README, re.S) for line in block.splitlines() if line.strip()
]
COMMANDS = [line.split("  #")[0].strip() for line in BASH if line.startswith("loadguard ")]


def test_the_command_lines_are_found():
    assert len(COMMANDS) == 14 and COMMANDS[0] == "loadguard zoo build minicpmv_like ./my-model"
    others = [line for line in BASH if not line.startswith("loadguard ")]
    assert [line.split()[0] for line in others] == ["make", "make", "pytest", "pytest", "pytest"]


def test_the_other_command_lines_name_what_exists():
    """make targets in the Makefile, pytest flags the plugin registers: the lines that are not loadguard's."""
    makefile = (ROOT / "Makefile").read_text()
    from loadguard import pytest_plugin

    plugin_source = Path(pytest_plugin.__file__).read_text()
    for line in BASH:
        words = line.split("#")[0].split()
        if words[0] == "make":
            assert re.search(rf"^{words[1]}:", makefile, re.M), line
        elif words[0] == "pytest":
            assert all(f'"{flag.split("=")[0]}"' in plugin_source for flag in words[1:] if flag.startswith("--")), line


EXIT = {
    "loadguard zoo build minicpmv_like ./my-model": 0,
    "loadguard audit ./my-model --trust-remote-code": 1,  # pos_embed, as loaded (auto: the workarounds it needs, said)
    "loadguard audit ./my-model --trust-remote-code --workaround none": 2,  # as plain transformers: the Hint names it
    "loadguard audit ./my-model --trust-remote-code --format json": 1,
    "loadguard audit ./my-model --trust-remote-code --forward": 1,  # pos_embed, then it runs
    "loadguard audit ./my-model --trust-remote-code --repair": 0,  # every finding repaired, the re-audit clean
    "loadguard audit ./my-model --trust-remote-code --repair --exit-non-zero-on-repair": 1,  # the load was broken
    "loadguard compare ./my-model --trust-remote-code": 1,
    "loadguard compare ./my-model --trust-remote-code --repair": 0,
    "loadguard trace ./my-model --trust-remote-code": 1,
    "loadguard fix ./my-model --out ./my-model-fixed --trust-remote-code": 0,  # patched, proven on 5.x and 4.57
    "loadguard scan ./my-model --trust-remote-code": 1,
    "loadguard scan --from models.txt --trust-remote-code --jobs 4 --format markdown": 1,
    "loadguard env": 0,
}


@pytest.mark.skipif(
    not IS_V5, reason=f"the commands audit loads that transformers {TRANSFORMERS_VERSION} does not break"
)
def test_command_lines_run_as_written(tmp_path, monkeypatch, capsys, compat_cache):
    """Each command, in order, in a fresh folder (models.txt lists ./my-model): exit codes as the README says."""
    from loadguard.cli import main

    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))  # fix proves its patch in the cached 4.57 environment
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("./my-model\n")
    codes = {}
    for line in COMMANDS:
        with pytest.raises(SystemExit) as info:
            main(shlex.split(line)[1:])
        captured = capsys.readouterr()
        codes[line] = info.value.code
        assert "unexpected" not in captured.err and "Traceback" not in captured.err, (line, captured.err)
        if line == "loadguard audit ./my-model --trust-remote-code --workaround none":
            first = zoo.get("minicpmv_like").needed_workarounds[
                0
            ]  # what the v4-era code meets first on these versions
            assert (
                f"Hint: known failure of code written for older transformers/torch: run again with --workaround {first}"
                in captured.err
            )
    assert codes == EXIT
    assert zoo.entry_of(tmp_path / "my-model").name == "minicpmv_like"
