"""A crash of the broken model is a finding: which module raised, where, and what the load left wrong there."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from loadguard import zoo
from loadguard.report import Finding
from loadguard.runner.crash import Crash, guarded, locate, nearest

from ..conftest import IS_V5, TRANSFORMERS_VERSION
from ..conftest import run_cli as _cli

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.full((4,), 2**62, dtype=torch.long), persistent=False)
        self.weight = nn.Parameter(torch.zeros(4, 2))

    def forward(self, x):
        return self.weight[self.index[x]]


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Identity(), Table())

    def forward(self, x):
        return self.inner(x)


def test_locate_names_the_innermost_module_and_its_line():
    model = Outer()
    result, crash = guarded(model, lambda: model(torch.tensor([0])))
    assert result is None
    assert crash.exception == "IndexError"
    assert crash.module == "inner.1" and crash.module_class == "Table"
    assert crash.location.endswith(f"test_crash.py:{Table.forward.__code__.co_firstlineno + 1}")
    assert "(Table)" in crash.describe() and "IndexError in inner.1" in crash.describe()


def test_a_call_that_runs_is_no_crash():
    model = nn.Linear(2, 2)
    result, crash = guarded(model, lambda: model(torch.ones(2)).shape)
    assert crash is None and result == torch.Size([2])


def test_an_error_outside_the_model_has_no_module():
    def fails():
        raise ValueError("no module ran")

    crash = locate(nn.Linear(1, 1), _raised(fails))
    assert crash.module is None and crash.location is None and crash.describe() == "ValueError: no module ran"


def _raised(function) -> BaseException:
    try:
        function()
    except BaseException as error:  # noqa: BLE001
        return error
    raise AssertionError("did not raise")


def _finding(name: str, status: str = "uninitialized") -> Finding:
    return Finding(name, "buffer", "non_persistent_buffer", status, "float32", (1,), "cpu", "wrong")


def test_nearest_prefers_the_module_then_what_encloses_it_then_anything():
    findings = (_finding("a.b.x"), _finding("a.y"), _finding("c.z"), _finding("a.b.ok", "initialized"))
    assert nearest(findings, "a.b") == ((findings[0],), "in")
    assert nearest(findings, "a.q") == ((findings[0], findings[1]), "around")
    assert nearest(findings, "d") == (findings[:3], "elsewhere")
    assert nearest(findings, "") == (findings[:3], "in")
    assert nearest((), "a") == ((), "elsewhere")


BROKEN_FINITE = {"overwritten", "sharded"}  # wrong but finite: trace looks for NaN/Inf and may find none
NEVER_READ = {"rebuilt_before_use"}  # wrong after load, rebuilt before use: the outputs agree, nothing goes NaN


@needs_v5
@pytest.mark.parametrize("name", [entry.name for entry in zoo.entries()])
def test_compare_and_trace_diagnose_every_zoo_entry(capsys, zoo_folder, name):
    folder = str(zoo_folder(name))
    entry = zoo.get(name)
    broken = bool(entry.expected) and name not in NEVER_READ
    for command in ("compare", "trace"):
        code, out, err = _cli(
            capsys, command, folder, "--trust-remote-code", "--workaround", "auto", "--format", "json"
        )
        assert "unexpected" not in err, err
        if entry.runs_into:  # code that breaks when it runs on 5.x, loaded or built eagerly: nothing to compare
            (workaround, _, exception), *_ = entry.runs_into  # the first a plain run meets
            assert code == 2 and exception.split(": ", 1)[1] in err and f"--workaround {workaround}" in err, err
            continue
        document = json.loads(out)
        if not broken:
            assert code == 0, (command, out, err)
            continue
        if command == "trace" and name in BROKEN_FINITE and code == 0:
            assert document["finite"] is True
            continue
        assert code == 1, (command, out, err)
        expected = {f.tensor.split(".")[-1] for f in entry.expected}
        if document.get("crash"):
            named = [t["tensor"] for t in document["crash"]["tensors"]]
        elif command == "compare":
            named = [t["tensor"] for t in document["wrong_tensors"]]
        else:
            named = document["non_finite_tensors"]
        assert any(t.split(".")[-1] in expected for t in named), (command, named, expected)


@needs_v5
def test_a_crash_says_what_raised_and_what_the_load_left_wrong(capsys, zoo_folder):
    folder = str(zoo_folder("np_buffer"))
    code, out, err = _cli(capsys, "compare", folder, "--trust-remote-code")
    assert code == 1
    assert "the loaded model raised IndexError in positions (LgToyPositions) at modeling_lgtoy.py:" in out
    assert "the reference (built eagerly from code + checkpoint) runs the same call" in out
    assert "positions.index (uninitialized): 64 of 64 values are the integer maximum" in out
    assert f"run: loadguard compare {folder} --trust-remote-code --workaround auto --repair\n" in err

    code, out, err = _cli(capsys, "compare", folder, "--trust-remote-code", "--repair")
    assert code == 0 and "agree" in out


@needs_v5
def test_a_meta_tensor_attribute_is_named_not_copied(capsys, zoo_folder):
    code, out, _ = _cli(
        capsys, "trace", str(zoo_folder("tensor_attribute")), "--trust-remote-code", "--format", "json"
    )
    document = json.loads(out)
    assert code == 1
    assert document["crash"]["crash"]["exception"] == "NotImplementedError"
    assert [t["tensor"] for t in document["crash"]["tensors"]] == ["positions.inv_freq"]
    assert document["crash"]["tensors"][0]["status"] == "on_meta"


def test_a_crash_the_reference_has_too_is_not_blamed_on_the_load(capsys, zoo_folder, monkeypatch):
    from loadguard.runner import HfRunner

    def always_fails(self, *args, **kwargs):
        return self._run_model(lambda: self.model.no_such_method())

    monkeypatch.setattr(HfRunner, "generate_greedy_logprobs_limit", always_fails)
    code, out, err = _cli(capsys, "compare", str(zoo_folder("clean")), "--trust-remote-code")
    assert code == 2 and out == ""
    assert (
        "also when built eagerly from its code and checkpoint: the failure is the model's or the input's, not the load's"
        in err
    )
    assert "AttributeError" in err


def test_crash_serializes():
    crash = Crash("IndexError", "index 9 is out of bounds", "positions", "P", "modeling_x.py:3", ("v4-x",))
    assert json.loads(json.dumps(crash.to_dict())) == {
        "exception": "IndexError",
        "message": "index 9 is out of bounds",
        "module": "positions",
        "module_class": "P",
        "location": "modeling_x.py:3",
        "fixes": ["v4-x"],
    }


@needs_v5
def test_the_runner_notes_what_the_load_left_wrong_on_the_models_error(zoo_folder):
    from loadguard.runner import HfRunner

    runner = HfRunner(zoo_folder("np_buffer"), trust_remote_code=True, audit="off", poison=True)
    with pytest.raises(IndexError) as info:
        runner.generate_greedy(["describe what you see ."], 2)
    (note,) = info.value.__notes__
    assert note.startswith("loadguard: IndexError in positions (LgToyPositions) at modeling_lgtoy.py:")
    assert (
        "the load left these wrong in positions: positions.index (" in note and "positions.table (" in note
    )  # leftover memory: its status varies


def test_the_runner_adds_no_blame_when_nothing_is_wrong():
    from loadguard.runner.crash import crash_note as _crash_note

    model = Outer()
    note = _crash_note(model, _raised(lambda: model(torch.tensor([0]))))
    assert (
        note.startswith("loadguard: IndexError in inner.1 (Table) at ")
        and "finds no tensor of the model wrong" in note
    )
