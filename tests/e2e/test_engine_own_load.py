"""The engine suite's own load (issue 56): a plain ``AutoModel*.from_pretrained(path, trust_remote_code=True)`` in a test,
the way an engine's own runner loads its reference, seen by the plugin in every mode, with the marker's workarounds
around the whole load (the auto class's import of the remote code included)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from loadguard import zoo

from ..conftest import IS_V5, TRANSFORMERS_VERSION

pytest_plugins = ["pytester"]
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "engine_own_runner"

# one test per way a suite writes it; MODEL is the zoo's MiniCPM-V-shaped folder (code written for transformers 4)
PLAIN_SUITE = """
import pytest
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForImageTextToText

MODEL = {model!r}


@pytest.mark.loadguard(workarounds="auto")
def test_marker_string():
    AutoModelForCausalLM.from_pretrained(MODEL, trust_remote_code=True)


@pytest.mark.loadguard(workarounds=["auto"])
def test_marker_list():
    AutoModelForCausalLM.from_pretrained(MODEL, trust_remote_code=True)


def test_no_marker():
    AutoModelForCausalLM.from_pretrained(MODEL, trust_remote_code=True)


@pytest.mark.loadguard(workarounds="auto")
def test_auto_model():
    AutoModel.from_pretrained(MODEL, trust_remote_code=True)


@pytest.mark.loadguard(workarounds="auto")
def test_vision_to_text_auto_class():
    AutoModelForImageTextToText.from_pretrained(MODEL, trust_remote_code=True)


@pytest.mark.loadguard(workarounds="auto")
def test_class_from_dynamic_module():
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    config = AutoConfig.from_pretrained(MODEL, trust_remote_code=True)
    cls = get_class_from_dynamic_module(config.auto_map["AutoModel"], MODEL)
    cls.from_pretrained(MODEL, trust_remote_code=True)


@pytest.mark.loadguard(workarounds="auto")
def test_hf_runner_fixture(hf_runner):
    with hf_runner(MODEL, trust_remote_code=True):
        pass


@pytest.mark.loadguard(workarounds="autoo")
def test_unknown_name():
    AutoModelForCausalLM.from_pretrained(MODEL, trust_remote_code=True)
"""

MARKED = (
    "test_marker_string",
    "test_marker_list",
    "test_auto_model",
    "test_vision_to_text_auto_class",
    "test_class_from_dynamic_module",
)


def sections(output: str) -> dict[str, str]:
    """Each failed or errored test's section of pytest's report, by test name."""
    parts = re.split(r"\n_{3,} (?:ERROR at setup of )?(test_\w+) _{3,}\n", output)
    found: dict[str, str] = {}
    for name, text in zip(parts[1::2], parts[2::2]):
        found[name] = found.get(name, "") + re.split(r"\n={3,} ", text)[0]
    return found


def reports(output: str) -> str:
    """The failure reports alone: ``-rA``'s short summary repeats each message's first line, cut to the terminal's
    width (whole on a wide one), so counting there would depend on the terminal."""
    return output.split(" short test summary info ")[0]


def outcomes(output: str) -> dict[str, str]:
    """test name -> PASSED / FAILED / ERROR, from ``-rA``'s short summary."""
    return {m.group(2): m.group(1) for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S+::(test_\w+)", output, re.M)}


@pytest.fixture(scope="module")
def vision_model(tmp_path_factory):
    """The MiniCPM-V-shaped zoo model, whose config also names a vision-to-text auto class (as VLM repos do)."""
    folder = zoo.build("minicpmv_like", tmp_path_factory.mktemp("engine_own_load") / "model")
    config_file = Path(folder) / "config.json"
    config = json.loads(config_file.read_text())
    config["auto_map"]["AutoModelForImageTextToText"] = config["auto_map"]["AutoModelForCausalLM"]
    config_file.write_text(json.dumps(config, indent=2))
    return str(folder)


@pytest.fixture(scope="module")
def plain_suite(vision_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("plain_suite")
    (folder / "test_plain.py").write_text(PLAIN_SUITE.format(model=vision_model))
    return folder


def run(pytester, folder, *args):
    for file in Path(folder).glob("*.py"):
        shutil.copy(file, pytester.path / file.name)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *args)


@needs_v5
def test_fail_names_pos_embed_and_fix_for_every_spelling_and_auto_class(pytester, plain_suite, vision_model):
    result = run(pytester, plain_suite, "--loadguard=fail")
    out = result.stdout.str()
    found, text = outcomes(out), sections(out)
    for name in (*MARKED, "test_hf_runner_fixture"):
        assert found[name] == "FAILED", name
        assert "resampler.pos_embed (uninitialized at resampler_lgminicpmv.py:" in text[name], name
        assert "NameError" not in text[name], name
    for name in MARKED:  # the lasting change, with the flags its load needed, beside the in-memory repair
        assert f"loadguard fix {vision_model} --trust-remote-code --out {vision_model}-fixed" in text[name], name
        assert "--loadguard=repair" in text[name], name
    assert "loadguard fix" in text["test_hf_runner_fixture"]
    # no marker: it fails as it would without loadguard, and the note names the workaround and the marker
    assert found["test_no_marker"] == "FAILED"
    assert "NameError: name 'List' is not defined" in text["test_no_marker"]
    assert (
        "loadguard: known failure of code written for older transformers/torch: mark the test "
        "@pytest.mark.loadguard(workarounds=['remote-code-typing-aliases']) (or workarounds='auto'"
    ) in text["test_no_marker"]
    # a name that is no workaround: one line listing the known names, at setup
    assert found["test_unknown_name"] == "ERROR"
    assert "there is no workaround called 'autoo'" in text["test_unknown_name"]
    assert "remote-code-typing-aliases" in text["test_unknown_name"]  # among the known names
    assert "Traceback" not in text["test_unknown_name"]


@needs_v5
def test_repair_passes_and_off_still_names_the_workaround(pytester, plain_suite):
    result = run(pytester, plain_suite, "--loadguard=repair")
    found, text = outcomes(result.stdout.str()), sections(result.stdout.str())
    for name in (*MARKED, "test_hf_runner_fixture"):
        assert found[name] == "PASSED", name
    assert (
        found["test_no_marker"] == "FAILED" and "workarounds=['remote-code-typing-aliases']" in text["test_no_marker"]
    )
    # off, the default: nothing changes a test's outcome, and the failure still gets the note
    result = run(pytester, plain_suite, "-k", "no_marker")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "NameError: name 'List' is not defined" in out
    assert "mark the test @pytest.mark.loadguard(workarounds=['remote-code-typing-aliases'])" in out


V4_SUITE = """
import pytest
from transformers import AutoModelForCausalLM

pytestmark = pytest.mark.loadguard(workarounds="auto")
FOLDERS = {folders!r}


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_load(name):
    AutoModelForCausalLM.from_pretrained(FOLDERS[name], trust_remote_code=True)
"""


@needs_v5
def test_every_zoo_model_that_needs_an_import_workaround_through_xdist(pytester, tmp_path_factory):
    """Each zoo model whose plain load fails on this transformers: under ``fail`` with the module marker, through
    pytest-xdist workers, it fails naming the tensors the load left wrong, never the load error."""
    built = tmp_path_factory.mktemp("v4_zoo")
    needing = {e.name: e for e in zoo.entries() if e.load_error is not None and e.failure_mode}
    assert len(needing) >= 15  # every v4-era failure the zoo reproduces
    folders = {name: str(zoo.build(name, built / name)) for name in needing}
    pytester.makepyfile(test_v4=V4_SUITE.format(folders=folders))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "-n", "2", "--loadguard=fail")
    result.assert_outcomes(failed=len(needing))
    out = reports(result.stdout.str())
    failed = re.findall(r"loadguard: \d+ tensor\(s\) of (\S+) are not what", out)
    assert sorted(Path(path).name for path in failed) == sorted(needing)
    for name, entry in needing.items():
        expected = entry.expected_for(2)[0].tensor
        assert re.search(
            rf"{re.escape(folders[name])} are not what its code and checkpoint define: .*{re.escape(expected)}", out
        ), name
    assert "NameError" not in out and "ImportError" not in out
    assert "in 2 xdist worker(s)" in out


@needs_v5
def test_the_engine_example_with_its_own_runner(pytester, capsys):
    """examples/engine_own_runner: its own runner loads with the auto classes; fail names pos_embed and the fix, repair
    passes, and so through loadguard repeat (each run a fresh process)."""
    result = run(pytester, EXAMPLE, "--loadguard=fail", "-k", "small")
    result.assert_outcomes(failed=2)
    out = reports(result.stdout.str())
    assert out.count("resampler.pos_embed (uninitialized at resampler_lgminicpmv.py:") >= 2
    assert out.count("Lasting fix, for everyone who loads it: loadguard fix ") == 2
    assert "NameError" not in out
    from loadguard.cli import main

    capsys.readouterr()  # pytester's own output
    with pytest.raises(SystemExit) as info:
        main(
            [
                "repeat",
                "-n",
                "2",
                "--loadguard",
                "repair",
                "--format",
                "json",
                "--",
                str(pytester.path),
                "-k",
                "small-single",
            ]
        )
    document = json.loads(capsys.readouterr().out)
    assert info.value.code == 0 and document["ok"] is True and len(document["tests"]) == 1
    for test in document["tests"].values():
        assert (
            test["pass_rate"] == 1.0
            and test["runs"] == 2
            and test["findings"] == ["resampler.pos_embed uninitialized"]
        )
