"""Zero false alarms (issue 17): a peer-style suite of tiny native models, loaded the ways real suites load them
(examples/peer_suite), has the same outcome plain, under ``--loadguard=fail`` and under ``--loadguard-poison``;
the plugin counts every load; a model that really loads broken still fails under it."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from ..conftest import IS_V5

SUITE = Path(__file__).resolve().parents[2] / "examples" / "peer_suite"


def run_suite(tmp_path, name: str, *options: str, broken: bool = False) -> dict:
    """The suite in a fresh pytest process: {test id: outcome}, the loads it made and the plugin's summary."""
    junit, count = tmp_path / f"{name}.xml", tmp_path / f"{name}.count"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "LOADGUARD_PEER_COUNT": str(count),
        "LOADGUARD_PEER_BROKEN": "1" if broken else "0",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(SUITE),
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-q",
            "--junitxml",
            str(junit),
            "--basetemp",
            str(tmp_path / f"{name}-tmp"),
            *options,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=SUITE,
        timeout=600,
    )
    outcomes = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        outcomes[case.get("name")] = kind
    return {"outcomes": outcomes, "loads": int(count.read_text()), "stdout": result.stdout, "code": result.returncode}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("peer")
    return {
        "plain": run_suite(tmp_path, "plain", "-p", "no:loadguard"),
        "fail": run_suite(tmp_path, "fail", "--loadguard=fail"),
        "poison": run_suite(tmp_path, "poison", "--loadguard=fail", "--loadguard-poison"),
    }


def test_the_same_outcome_plain_under_fail_and_under_poison(runs):
    plain = runs["plain"]
    assert plain["code"] == 0 and len(plain["outcomes"]) >= 45, plain["stdout"][-2000:]
    assert set(plain["outcomes"].values()) == {"passed", "skipped"}
    for mode in ("fail", "poison"):
        assert runs[mode]["outcomes"] == plain["outcomes"], (mode, runs[mode]["stdout"][-3000:])


def test_the_plugin_counts_every_load_and_names_each(runs):
    for mode in ("fail", "poison"):
        run = runs[mode]
        assert run["loads"] == runs["plain"]["loads"] > 45
        assert f": {run['loads']} model load(s) audited" in run["stdout"], run["stdout"][-2000:]
        summary = run["stdout"].split(" loadguard ", 1)[1]
        assert "\n  None:" not in summary  # a state dict with no folder is named by its class
        assert (
            "\n  LlamaForCausalLM: 1 load(s), 0 broken; not run: checkpoint_fidelity, missing_key (no checkpoint folder"
            in summary
        )
        assert "initialized on request" in summary  # heads from base checkpoints, ignored size mismatches


def test_a_model_that_really_loads_broken_still_fails(tmp_path):
    plain = run_suite(tmp_path, "broken-plain", "-p", "no:loadguard", "-k", "broken or roundtrip", broken=True)
    guarded = run_suite(tmp_path, "broken-fail", "--loadguard=fail", "-k", "broken or roundtrip", broken=True)
    assert set(plain["outcomes"].values()) == {"passed"} and plain["outcomes"].keys() == guarded["outcomes"].keys()
    differing = {name for name in plain["outcomes"] if plain["outcomes"][name] != guarded["outcomes"][name]}
    if not IS_V5:  # transformers 4.x keeps the buffers, but moves a missing key off meta with empty_like too
        assert differing == {"test_a_missing_scalar_nothing_initializes_loads_broken"}
    else:
        assert differing == {
            "test_a_model_that_really_loads_broken",
            "test_a_missing_scalar_nothing_initializes_loads_broken",
        }
        assert "positions.table (" in guarded["stdout"]  # uninitialized or mismatch: whatever memory the load got
        assert "logit_scale (uninitialized" in guarded["stdout"]  # no poison: what initialization did decides
