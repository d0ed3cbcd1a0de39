"""``audit --forward`` and the plugin's ``--loadguard-forward``: the loaded model run once on inputs built from its
config; a crash is a finding with the model's line and the API it called; a wrong tensor the first pass rebuilds
before reading it is said to be so. ``compare`` on a folder without a tokenizer builds token ids and says so."""

from __future__ import annotations

import json
import shutil

import pytest

import loadguard
from loadguard import zoo
from loadguard._hf import model_outputs

from ..conftest import IS_V5, TRANSFORMERS_VERSION, run_cli

v5_only = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} has the v4 APIs these call")
pytest_plugins = ["pytester"]


def runs_check(document: dict) -> dict:
    return next(c for c in document["checks"] if c["check"] == "runs")


@v5_only
def test_a_forward_that_calls_a_removed_api_is_a_finding_with_its_line(zoo_folder, capsys):
    code, out, err = run_cli(
        capsys, "audit", str(zoo_folder("v4_forward_api")), "--trust-remote-code", "--forward", "--format", "json"
    )
    document = json.loads(out)
    crash = [f for f in document["findings"] if f["check"] == "runs"]
    assert code == 1 and len(crash) == 1
    assert (crash[0]["tensor"], crash[0]["status"], crash[0]["location"]) == (
        "forward",
        "crashed",
        "modeling_lgv4fwd.py:16",
    )
    assert "forward raised AttributeError at modeling_lgv4fwd.py:16" in crash[0]["detail"]
    assert "(it calls get_head_mask, which this transformers does not have)" in crash[0]["detail"]
    assert "--workaround v4-model-attributes" in crash[0]["detail"]
    assert runs_check(document) | {"reason": ""} == {
        "check": "runs",
        "ran": True,
        "checked": 1,
        "failed": 1,
        "unverifiable": 0,
        "initialized": 0,
        "reason": "",
    }


@v5_only
def test_a_generate_that_calls_a_removed_api_is_a_finding_of_the_repaired_model(zoo_folder, capsys):
    """The legacy-cache model's forward runs; its generate raises. Repaired first (--repair), the crash is its own,
    not the garbage index table's."""
    code, out, _ = run_cli(
        capsys,
        "audit",
        str(zoo_folder("v4_legacy_cache")),
        "--trust-remote-code",
        "--forward",
        "--repair",
        "--format",
        "json",
    )
    document = json.loads(out)
    crash = [f for f in document["findings"] if f["check"] == "runs"]
    assert code == 1 and [(f["tensor"], f["location"]) for f in crash] == [("generate", "modeling_lgv4cache.py:26")]
    assert "DynamicCache' has no attribute 'from_legacy_cache'" in crash[0]["detail"]
    assert "--workaround v4-legacy-cache" in crash[0]["detail"] and "may be theirs" not in crash[0]["detail"]
    assert runs_check(document)["checked"] == 2


def test_a_model_that_runs_clean_passes_the_runs_check(zoo_folder, capsys):
    code, out, _ = run_cli(
        capsys, "audit", str(zoo_folder("clean")), "--trust-remote-code", "--forward", "--format", "json"
    )
    document = json.loads(out)
    assert code == 0 and document["ok"] and not [f for f in document["findings"] if f["check"] == "runs"], out
    check = runs_check(document)
    assert (check["ran"], check["checked"], check["failed"]) == (True, 2, 0)
    assert check["reason"] == "a forward pass on attention_mask, input_ids built from the config, then 8 greedy tokens"


def test_without_forward_there_is_no_runs_check(zoo_folder, capsys):
    code, out, _ = run_cli(capsys, "audit", str(zoo_folder("clean")), "--trust-remote-code", "--format", "json")
    assert code == 0 and "runs" not in {c["check"] for c in json.loads(out)["checks"]}


@v5_only
def test_a_tensor_rebuilt_before_its_first_use_is_said_to_be_so(zoo_folder, capsys):
    folder = str(zoo_folder("rebuilt_before_use"))
    code, out, _ = run_cli(capsys, "audit", folder, "--trust-remote-code", "--forward", "--format", "json")
    (finding,) = json.loads(out)["findings"]
    assert code == 1 and (finding["tensor"], finding["status"]) == ("rotary.cached", "uninitialized")
    assert "wrong after load, rebuilt before use" in finding["detail"]
    # without the run nothing is claimed about its use
    code, out, _ = run_cli(capsys, "audit", folder, "--trust-remote-code", "--format", "json")
    assert "rebuilt" not in json.loads(out)["findings"][0]["detail"]


@v5_only
def test_a_tensor_read_before_the_code_rebuilds_it_is_not_called_unused(zoo_folder, capsys):
    """np_buffer's index table is read as loaded (INT_MAX): the run crashes, and nothing is called rebuilt."""
    code, out, _ = run_cli(
        capsys, "audit", str(zoo_folder("np_buffer")), "--trust-remote-code", "--forward", "--format", "json"
    )
    document = json.loads(out)
    assert code == 1 and not any("rebuilt" in f["detail"] for f in document["findings"])
    (crash,) = [f for f in document["findings"] if f["check"] == "runs"]
    assert crash["detail"].startswith("forward raised IndexError at modeling_lgtoy.py:41")
    assert "may be theirs: run it repaired (--repair --forward)" in crash["detail"]


def test_compare_without_a_tokenizer_builds_token_ids_and_says_so(zoo_folder, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(zoo_folder("clean"), folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    code, out, err = run_cli(capsys, "compare", str(folder), "--trust-remote-code", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["ok"] and document["inputs"].startswith("no tokenizer in the folder")
    assert all(len(side["ids"]) == 8 and side["text"] == "" for side in document["a"])
    code, out, err = run_cli(capsys, "compare", str(folder), "--trust-remote-code")
    assert code == 0 and "Note: no tokenizer in the folder" in err


@v5_only
def test_the_plugin_fails_a_test_whose_model_crashes_when_run(pytester, zoo_folder):
    folder = zoo_folder("v4_forward_api")
    pytester.makepyfile(
        f"""
        def test_loads(loadguard_report):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True)
        """
    )
    result = pytester.runpytest_subprocess("--loadguard=repair", "--loadguard-forward", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*loadguard: forward of *: forward raised AttributeError at modeling_lgv4fwd.py:16*"])
    result = pytester.runpytest_subprocess("--loadguard=repair", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)  # without the flag the load alone is checked (and repaired)


@v5_only
@pytest.mark.parametrize("entry", [e.name for e in zoo.entries() if e.runs_into])
def test_each_zoo_entry_that_breaks_past_the_load_breaks_where_it_says(entry, zoo_folder):
    """ZooEntry.runs_into: loaded on transformers 5 and its tensors repaired, the model still fails when run, at the
    stage and with the exception the entry records, and the workaround it names declares that failure."""
    (workaround, stage, exception), *_ = zoo.get(entry).runs_into  # the first a plain run meets
    model = loadguard.load("AutoModelForCausalLM", zoo_folder(entry), trust_remote_code=True)
    crash = model_outputs(model, fixes=loadguard.workarounds.fixes_for)["error"]
    assert (crash["stage"], f"{crash['type']}: {crash['message']}", crash["fixes"]) == (stage, exception, [workaround])
