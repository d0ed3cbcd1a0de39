"""The pytest plugin and the flakiness runner, run for real with pytester on the example engine suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ..conftest import IS_V5, TRANSFORMERS_VERSION

pytest_plugins = ["pytester"]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "engine_suite"
needs_v5 = pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break the example model"
)


@pytest.fixture
def suite(pytester):
    for file in EXAMPLE.glob("*.py"):
        shutil.copy(file, pytester.path / file.name)
    return pytester


def test_plugin_is_registered_with_its_options_and_marker(pytester):
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--loadguard={off,warn,fail,repair}*", "*--loadguard-poison*"])
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.loadguard(policy=None, workarounds=(), strict_stale=False)*"])


@needs_v5
def test_repair_makes_every_case_pass_and_summarizes(suite):
    import re

    result = suite.runpytest_subprocess("--loadguard=repair", "--strict-markers")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        ["*loadguard*", "*policy repair, poison on: 6 model load(s) audited*"]
    )  # poisoned as the CLI's loads
    # every broken one was repaired
    line = re.search(r"6 load\(s\), (\d) broken(?: \(resampler.pos_embed\), (\d) repaired)?", result.stdout.str())
    assert line is not None and (line.group(1) == "0" or line.group(1) == line.group(2))
    result = suite.runpytest_subprocess(
        "--loadguard=repair", "--loadguard-poison", "--strict-markers"
    )  # every load broken
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "*policy repair, poison on: 6 model load(s) audited*",
            "*6 load(s), 6 broken (resampler.pos_embed), 6 repaired*",
        ]
    )


@needs_v5
def test_poison_fails_every_case_the_same_way_naming_pos_embed(suite):
    """No --loadguard flag: the suite's tests ask for the hf_runner fixture, so their loads are checked (fail) and
    every case fails at its load, naming the tensor, before comparing outputs of a broken model."""
    result = suite.runpytest_subprocess("--loadguard-poison", "-rN")
    result.assert_outcomes(failed=6)
    out = result.stdout.str()
    assert out.count("loadguard: 1 tensor(s) of") == 6 and "resampler.pos_embed (uninitialized at " in out
    assert "non-finite logprob" not in out  # never compared


@needs_v5
def test_fail_policy_names_the_tensor_and_the_fix(suite):
    # under poison every load is broken; without it a load can by chance get a freed copy of the right table
    # -rN: no short summary, whose lines are cut to the terminal width (so counts would depend on COLUMNS)
    result = suite.runpytest_subprocess("--loadguard=fail", "--loadguard-poison", "-rN")
    result.assert_outcomes(failed=6)
    out = result.stdout.str()
    assert out.count("loadguard: 1 tensor(s) of") == 6 and "resampler.pos_embed (uninitialized at " in out
    assert "During handling of the above exception" not in out  # one message per failure, no chained copy
    assert "Hint: repair it in memory with loadguard.repair" in out and "_init_weights" in out
    assert out.count("In this pytest run: --loadguard=repair") == 6


@needs_v5
def test_marker_workarounds_and_strict_stale(suite):
    suite.makepyfile(
        test_marked="""
        import pytest
        from loadguard import zoo

        @pytest.mark.loadguard(policy="fail", workarounds=["auto", "minicpmv-pos-cache"])
        def test_workaround_fixes_it(hf_runner, tmp_path, loadguard_report):
            path = zoo.build("minicpmv_like", tmp_path / "m")
            with hf_runner(path, trust_remote_code=True) as hf:
                assert hf.report.ok
                # auto applies what this transformers needs; pos-cache and the runner patch: 2 more
                assert [w.status for w in hf.workarounds] == ["applied"] * (len(zoo.get("minicpmv_like").needed_workarounds) + 2)

        @pytest.mark.loadguard(workarounds=["auto", "minicpmv-pos-cache"], strict_stale=True)
        def test_stale_is_an_error(hf_runner, tmp_path):
            path = zoo.build("minicpmv_like_fixed", tmp_path / "m")
            with hf_runner(path, trust_remote_code=True):
                pass

        def test_plain_from_pretrained_is_audited(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            path = zoo.build("np_buffer", tmp_path / "m")
            AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)

        @pytest.mark.loadguard(policy="repair")
        def test_repair_policy_repairs_a_plain_load(tmp_path, loadguard_report):
            import torch
            from transformers import AutoModelForCausalLM
            path = zoo.build("np_buffer", tmp_path / "m")
            model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
            # the report handed back is the model as the test gets it: repaired, ok, and saying so
            assert loadguard_report[0].ok and "repaired by loadguard.repair:" in loadguard_report[0].method
            assert "positions.table" in loadguard_report[0].method
            assert model.loadguard_report is loadguard_report[0]
            assert all(torch.isfinite(b).all() for b in model.buffers() if b.is_floating_point())

        @pytest.mark.loadguard(policy="repair")
        def test_repair_policy_fails_what_repair_cannot_fix(tmp_path):
            from transformers import AutoModelForCausalLM
            path = zoo.build("missing_key", tmp_path / "m")
            AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
            raise AssertionError("a still-broken model reached the test body")

        @pytest.mark.loadguard(policy="repair")
        def test_runner_repair_policy_fails_what_repair_cannot_fix(hf_runner, tmp_path):
            with hf_runner(zoo.build("missing_key", tmp_path / "m"), trust_remote_code=True):
                raise AssertionError("a still-broken model reached the test body")
        """
    )
    result = suite.runpytest_subprocess(
        "test_marked.py", "--loadguard=fail", "--loadguard-poison", "--strict-markers", "-rN"
    )
    result.assert_outcomes(passed=2, failed=4)
    out = result.stdout.str()
    assert "StaleWorkaroundError" in out and "preserves resampler.pos_embed" in out
    assert "loadguard: 4 tensor(s) of" in out and "positions.table (uninitialized at " in out
    assert out.count("repair left it broken (logit_scale") == 2 and "still-broken model reached" not in out
    assert "In this pytest run: --loadguard=repair" not in out  # repair already ran: no advice to turn it on


@needs_v5
def test_a_load_that_fails_like_v4_code_names_the_marker_that_fixes_it(suite):
    suite.makepyfile(
        test_v4="""
        import pytest
        from loadguard import zoo

        def test_plain_from_pretrained(tmp_path):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained(zoo.build("v4_rope_scaling", tmp_path / "m"), trust_remote_code=True)

        def test_runner(hf_runner, tmp_path):
            with hf_runner(zoo.build("v4_torch_fx", tmp_path / "m"), trust_remote_code=True):
                pass

        @pytest.mark.loadguard(workarounds="auto")
        def test_auto_marker(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained(zoo.build("v4_rope_scaling", tmp_path / "m"), trust_remote_code=True)
            (outcome,) = loadguard_report[0].workarounds
            assert (outcome.name, outcome.status) == ("v4-rope-scaling", "applied") and outcome.auto.startswith("auto:")
            assert "rotary.inv_freq" in {f.tensor for f in loadguard_report[0].failures}
        """
    )
    result = suite.runpytest_subprocess(
        "test_v4.py", "--loadguard=warn", "--loadguard-poison", "-rN", "-p", "no:warnings"
    )
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "KeyError: 'type'" in out
    assert (
        "loadguard: known failure of code written for older transformers/torch: mark the test @pytest.mark.loadguard(workarounds=['v4-rope-scaling'])"
        in out
    )
    assert "mark the test @pytest.mark.loadguard(workarounds=['v4-torch-fx-available']) (or workarounds='auto'" in out


@needs_v5
def test_a_scan_inside_a_test_is_not_audited_and_leaves_the_plugin_working(pytester):
    pytester.makepyfile(
        """
        import loadguard
        from loadguard import zoo

        def test_scan_then_load(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            path = zoo.build("np_buffer", tmp_path / "m")
            report = loadguard.scan(path, trust_remote_code=True)
            assert report.mode == "scan" and not report.ok
            assert loadguard_report == []  # the scan's weightless load is loadguard's own: not audited by the plugin
            AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)  # a real load: audited, fails the test
        """
    )
    result = pytester.runpytest_subprocess("--loadguard=fail", "--loadguard-poison", "-rN", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "loadguard: 4 tensor(s) of" in out and "positions.table (uninitialized at " in out
    assert "1 model load(s) audited" in out


def test_loadguard_report_fixture_and_patch_undone(pytester):
    from transformers import PreTrainedModel

    before = PreTrainedModel.__dict__["from_pretrained"]
    pytester.makepyfile(
        """
        from loadguard import zoo

        def test_reports(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            path = zoo.build("clean", tmp_path / "m")
            AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
            assert len(loadguard_report) == 1 and loadguard_report[0].ok
        """
    )
    result = pytester.runpytest_inprocess("--loadguard=repair", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert PreTrainedModel.__dict__["from_pretrained"] is before


def test_plugin_costs_nothing_in_a_run_without_transformers_and_patches_it_when_imported(pytester):
    pytester.makepyfile(
        test_order="""
        import sys

        def test_a_plain_test_imports_nothing():
            assert "torch" not in sys.modules and "transformers" not in sys.modules

        def test_transformers_imported_later_is_patched():
            from transformers import PreTrainedModel
            assert PreTrainedModel.from_pretrained.__func__.__code__.co_filename.endswith("pytest_plugin/_hook.py")
        """
    )
    result = pytester.runpytest_subprocess(
        "--loadguard=fail", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:anyio", "-p", "no:hypothesispytest"
    )
    result.assert_outcomes(passed=2)


def test_off_installs_no_hook_unless_a_marker_asks(pytester):
    """--loadguard=off (the default) leaves from_pretrained untouched: a suite sees transformers' own; a run whose tests
    carry a loadguard marker gets the hook (the marker may set a policy for its tests)."""
    pytester.makepyfile(
        test_untouched="""
        def test_from_pretrained_is_transformers_own():
            from transformers import PreTrainedModel
            assert "loadguard" not in PreTrainedModel.from_pretrained.__func__.__code__.co_filename
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=1)
    pytester.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.loadguard(policy="fail")
        def test_marked_tests_get_the_hook():
            from transformers import PreTrainedModel
            assert PreTrainedModel.from_pretrained.__func__.__code__.co_filename.endswith("pytest_plugin/_hook.py")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "test_marked.py")
    result.assert_outcomes(passed=1)


def run_repeat(pytester, *args):
    from loadguard.cli import main

    with pytest.raises(SystemExit) as info:
        main(["repeat", *args, "--format", "json", "--", str(pytester.path), "-k", "small"])
    return info.value.code


@needs_v5
def test_repeat_repair_is_stable_with_one_fingerprint(suite, capsys):
    code = run_repeat(suite, "-n", "2", "--loadguard", "repair")
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["ok"] is True and len(document["tests"]) == 2
    for test in document["tests"].values():
        assert test["pass_rate"] == 1.0 and test["distinct_outcomes"] == 1 and test["first_differing_run"] is None
        assert test["fingerprints"][0] == test["fingerprints"][1]


@needs_v5
def test_repeat_poison_fails_identically_every_run(suite, capsys):
    code = run_repeat(suite, "-n", "2", "--poison")
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["ok"] is False
    for test in document["tests"].values():
        assert test["passed"] == 0 and test["distinct_outcomes"] == 1
        assert test["findings"] == ["resampler.pos_embed uninitialized"]


@needs_v5
def test_repeat_jobs_runs_each_xdist_worker_as_one_fresh_run(suite, capsys):
    code = run_repeat(suite, "-n", "3", "--jobs", "2", "--poison")  # one batch of 2 workers, then 1
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["jobs"] == 2 and len(document["tests"]) == 2
    for test in document["tests"].values():
        assert test["runs"] == 3 and test["passed"] == 0 and test["distinct_outcomes"] == 1
        assert test["outcomes"] == ["failed"] * 3 and test["findings"] == ["resampler.pos_embed uninitialized"]


def test_repeat_jobs_refuses_a_second_xdist_request(suite, capsys):
    from loadguard.cli import main

    with pytest.raises(SystemExit) as info:
        main(["repeat", "-n", "2", "--jobs", "2", "--", str(suite.path), "-n", "2"])
    assert info.value.code == 2
    assert "--jobs and a pytest -n/--dist after -- both ask for xdist workers" in capsys.readouterr().err


def test_repeat_jobs_without_xdist_says_what_to_install(suite, capsys, monkeypatch):
    from loadguard.cli import main, repeat

    monkeypatch.setattr(repeat.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit) as info:
        main(["repeat", "-n", "2", "--jobs", "2", "--", str(suite.path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--jobs needs pytest-xdist" in err and "pip install pytest-xdist" in err


def test_record_runs_per_process_or_merged():
    from loadguard.cli.repeat import runs_of

    record = {"processes": {"gw10": {"c": 3}, "gw2": {"b": 2}, "gw0": {"a": 1}}}
    assert runs_of(record, per_process=True) == [{"a": 1}, {"b": 2}, {"c": 3}]  # gw0, gw2, gw10: numeric order
    assert runs_of(record, per_process=False) == [{"a": 1, "b": 2, "c": 3}]  # a user's -n splits one run


@needs_v5
def test_xdist_workers_report_their_loads_to_the_summary_and_record(suite):
    record = suite.path / "record.json"
    # under poison: without it a load can by chance get a freed copy of the right table (seen in a fresh-clone run)
    result = suite.runpytest_subprocess(
        "--loadguard=repair", "--loadguard-poison", "-n", "2", "-k", "small", f"--loadguard-record={record}"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [  # each worker builds its own copy of the model (per-worker temp folders)
            "*policy repair, poison on: 2 model load(s) audited in 2 xdist worker(s)*",
            "*popen-gw0*: 1 load(s), 1 broken (resampler.pos_embed), 1 repaired*",
            "*popen-gw1*: 1 load(s), 1 broken (resampler.pos_embed), 1 repaired*",
        ]
    )
    processes = json.loads(record.read_text())["processes"]
    assert set(processes) == {"gw0", "gw1"}
    results = {nodeid: r for p in processes.values() for nodeid, r in p.items()}
    assert len(results) == 2 and all(r["outcome"] == "passed" and r["from_outputs"] for r in results.values())


def test_repeat_summary_locates_the_first_difference():
    from loadguard.cli.repeat import summarize

    runs = [
        {"t": {"outcome": "passed", "fingerprint": "a", "tokens": [[1, 2, 3]], "message": "", "findings": []}},
        {"t": {"outcome": "passed", "fingerprint": "a", "tokens": [[1, 2, 3]], "message": "", "findings": []}},
        {
            "t": {
                "outcome": "failed",
                "fingerprint": "b",
                "tokens": [[1, 2, 9]],
                "message": "AssertionError",
                "findings": [],
            }
        },
    ]
    (summary,) = summarize(runs).values()
    assert summary["pass_rate"] == 2 / 3 and summary["distinct_outcomes"] == 2
    assert summary["first_differing_run"] == 2 and summary["first_differing_token"] == {"prompt": 0, "position": 2}


@pytest.mark.slow
@needs_v5
def test_done_when_twenty_runs(suite, capsys):
    """The issue's bar: 20 runs of the six cases; repair passes 20/20 with one fingerprint each."""
    from loadguard.cli import main

    with pytest.raises(SystemExit) as info:
        main(["repeat", "-n", "20", "--loadguard", "repair", "--format", "json", "--", str(suite.path)])
    document = json.loads(capsys.readouterr().out)
    assert info.value.code == 0
    assert all(t["passed"] == 20 and t["distinct_outcomes"] == 1 for t in document["tests"].values())


@needs_v5
def test_without_poison_a_missing_scalar_transformers_calls_initialized_fails(pytester):
    """transformers' loading info lists logit_scale as newly initialized; nothing initializes it. Without
    --loadguard-poison its leftover memory can look like a value: the verdict must come from what initialization did."""
    pytester.makepyfile(
        """
        import torch
        from loadguard import zoo

        def test_missing_scalar(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            model, info = AutoModelForCausalLM.from_pretrained(zoo.build("missing_key", tmp_path / "m"), trust_remote_code=True, output_loading_info=True)
            assert "logit_scale" in info["missing_keys"]

        def test_clean_loads_pass(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained(zoo.build("clean", tmp_path / "m"), trust_remote_code=True)
            assert loadguard_report[0].ok
        """
    )
    result = pytester.runpytest_subprocess("--loadguard=fail", "-rN", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "logit_scale (uninitialized" in out


def test_repeat_keeps_node_ids_and_fingerprints_a_failure_by_what_it_is(pytester, capsys):
    """Parametrized ids with brackets, dashes, spaces and '::' come back whole; a failure whose message changes every
    run (an address, a leftover value) has one fingerprint: its type, where it was raised, what the loads got wrong."""
    from loadguard.cli import main

    pytester.makepyfile(
        test_ids="""
        import random
        import pytest

        @pytest.mark.parametrize("case", ["case-1", "a b", "x::y", "[z]"])
        def test_ids(case):
            pass

        def test_fails_with_a_new_message_each_run():
            raise AssertionError(f"leftover value {random.random()} at 0x{random.getrandbits(48):x}")
        """
    )
    with pytest.raises(SystemExit):
        main(["repeat", "-n", "3", "--format", "json", "--", str(pytester.path)])
    tests = json.loads(capsys.readouterr().out)["tests"]
    names = sorted(nodeid.partition("::")[2] for nodeid in tests)
    assert names == sorted(
        ["test_fails_with_a_new_message_each_run"] + [f"test_ids[{c}]" for c in ("case-1", "a b", "x::y", "[z]")]
    )
    failing = next(t for nodeid, t in tests.items() if nodeid.endswith("each_run"))
    assert failing["passed"] == 0 and failing["distinct_outcomes"] == 1 and len(set(failing["fingerprints"])) == 1
    from loadguard.cli.repeat import test_name

    assert test_name("tests/test_ids.py::TestA::test_ids[x::y]") == "TestA::test_ids[x::y]"


def test_a_fixture_checks_without_any_command_line_flag(pytester):
    """--loadguard=off (the default) keeps the automatic hook away from tests that did not ask; a test that asks for a
    loadguard fixture asked for its loads to be checked."""
    pytester.makepyfile(
        test_fixture="""
        import pytest
        from loadguard import zoo

        def test_broken_load_fails(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained(zoo.build("np_buffer", tmp_path / "m"), trust_remote_code=True)

        @pytest.mark.loadguard(policy="repair")
        def test_repaired_is_ok(tmp_path, loadguard_report):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained(zoo.build("np_buffer", tmp_path / "m"), trust_remote_code=True)
            assert len(loadguard_report) == 1 and loadguard_report[0].ok

        def test_no_fixture_is_left_alone(tmp_path):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained(zoo.build("np_buffer", tmp_path / "m"), trust_remote_code=True)
        """
    )
    result = pytester.runpytest_subprocess("--loadguard-poison", "-rN", "-p", "no:cacheprovider")
    if IS_V5:
        result.assert_outcomes(passed=2, failed=1)
        assert (
            "test_broken_load_fails" in result.stdout.str()
            and "positions.table (uninitialized at " in result.stdout.str()
        )
    else:
        result.assert_outcomes(passed=3)


def test_a_failure_without_a_message_is_reported_not_an_internal_error(pytester):
    pytester.makepyfile(
        """
        def test_empty():
            next(iter(()))
        """
    )
    result = pytester.runpytest_subprocess(
        "--loadguard=fail", "--loadguard-record=record.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=1)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
