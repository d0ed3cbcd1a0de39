"""Executors: which one a spec names, the error when Ray is chosen and missing, and that the local one is the fork pool."""

from __future__ import annotations

import importlib.util

import pytest

from loadguard.cli import main
from loadguard.errors import ExecutorError, InvalidOptionError
from loadguard.executors import resolve


def test_specs_name_their_executor(monkeypatch):
    assert resolve(None).name == resolve("local").name == "local"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "ray" else real(name, *a))
    assert resolve("ray").name == "ray" and resolve("ray").address is None
    assert resolve("ray:auto").address == "auto" and resolve("ray:10.0.0.1:6379").address == "10.0.0.1:6379"
    for bad in ("spark", "ray:", "dask:auto"):
        with pytest.raises(InvalidOptionError, match="is not an executor"):
            resolve(bad)


def test_ray_chosen_and_not_installed_is_one_clear_error(monkeypatch, capsys, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ExecutorError, match="needs Ray, which is not installed"):
        resolve("ray:auto")
    (tmp_path / "models.txt").write_text("./nowhere\n")
    with pytest.raises(SystemExit) as info:
        main(["scan", "--from", str(tmp_path / "models.txt"), "--executor", "ray"])
    err = capsys.readouterr().err
    assert (
        info.value.code == 2
        and "needs Ray" in err
        and "pip install 'loadguard[ray]'" in err
        and "Traceback" not in err
    )


def test_the_local_executor_is_the_fork_pool_with_its_limits():
    from tests.executors._ray_tasks import behave

    outcomes = resolve("local").map(behave, ["ok", "sleep", "grow"], jobs=3, timeout=5, memory_limit=300 << 20)
    assert outcomes[0].ok and outcomes[0].value == "done: ok"
    assert [o.killed for o in outcomes] == [None, "timeout", "memory"]


def test_split_shares_work_evenly_and_keeps_order():
    from loadguard.executors import split

    assert split(list("abcde"), 2) == [["a", "b", "c"], ["d", "e"]]
    assert split(list("ab"), 5) == [["a"], ["b"]] and split([], 3) == [[]] and split(list("abc"), 1) == [list("abc")]
