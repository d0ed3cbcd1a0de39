"""Scan fleets through pre-imported forks (issue 18): isolation per model, a crash or a hang is a row, and the same
output as fresh interpreters."""

from __future__ import annotations

import os
import shutil

import pytest

from loadguard._infra import forks as _forks
from loadguard._scan import scan_fleet, scan_fleet_spawned, scan_row

from ..conftest import IS_V5

pytestmark = pytest.mark.skipif(
    not _forks.available(), reason="os.fork is not available on this platform: fleets use fresh interpreters"
)


def _with_code(zoo_folder, tmp_path, name: str, code: str):
    folder = tmp_path / name
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    modeling.write_text(modeling.read_text() + "\n" + code + "\n")
    return str(folder)


OPTIONS = {"trust_remote_code": True, "keys": "auto", "workarounds": [], "placement": {}}


def _comparable(row: dict) -> dict:
    row = dict(row)
    row.pop("seconds", None)
    return row


def test_one_models_code_does_not_reach_the_next(zoo_folder, tmp_path):
    leak = _with_code(
        zoo_folder,
        tmp_path,
        "leaks",
        "import sys, types\nsys.modules['loadguard_test_leak'] = types.ModuleType('leak')",
    )
    check = _with_code(
        zoo_folder,
        tmp_path,
        "checks",
        "import sys\nassert 'loadguard_test_leak' not in sys.modules, 'leaked from the previous model'",
    )
    rows = scan_fleet([leak, check, leak], OPTIONS, jobs=1)
    assert [row["scanned"] for row in rows] == [True, True, True], [row.get("error") for row in rows]
    import sys

    assert "loadguard_test_leak" not in sys.modules  # nor into the parent


def test_a_crash_and_a_hang_are_rows(zoo_folder, tmp_path):
    crash = _with_code(zoo_folder, tmp_path, "crashes", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    hang = _with_code(zoo_folder, tmp_path, "hangs", "import time\ntime.sleep(600)")
    fine = str(zoo_folder("clean"))
    rows = scan_fleet([crash, hang, fine], OPTIONS, jobs=2, timeout=20)
    assert rows[0]["scanned"] is False and "died (SIGSEGV)" in rows[0]["error"]
    assert rows[1]["scanned"] is False and "timed out after 20 s" in rows[1]["error"]
    assert rows[2]["scanned"] is True and rows[2]["model"] == fine


def test_the_fork_fleet_equals_fresh_interpreters(zoo_folder):
    targets = [str(zoo_folder(name)) for name in ("np_buffer", "clean", "overwritten", "typing_alias")]
    forked = scan_fleet(targets, OPTIONS, jobs=2)
    spawned = scan_fleet_spawned(targets, OPTIONS, jobs=2)
    assert [_comparable(r) for r in forked] == [_comparable(r) for r in spawned]
    assert _comparable(forked[0]) == _comparable(scan_row(targets[0], OPTIONS))  # and the in-process single scan


HOG = "import time, torch\n_HOG = torch.ones(100 * 2**20)  # 400 MB, touched\ntime.sleep(60)"


def test_a_model_over_the_memory_limit_is_a_row_saying_so(zoo_folder, tmp_path):
    hog = _with_code(zoo_folder, tmp_path, "hogs", HOG)
    fine = str(zoo_folder("clean"))
    rows = scan_fleet([hog, fine], OPTIONS, jobs=2, timeout=60, limit=100 * 2**20)
    assert (
        rows[0]["scanned"] is False
        and "went over the memory limit" in rows[0]["error"]
        and "limit 100.0 MiB" in rows[0]["error"]
    )
    assert "raise --memory-limit" in rows[0]["hint"] and "loadguard audit" in rows[0]["hint"]
    assert rows[1]["scanned"] is True  # its neighbour is unaffected


def test_memory_limit_through_the_cli(zoo_folder, tmp_path, capsys):
    from loadguard.cli import main
    from loadguard.cli._limits import memory_limit

    hog = _with_code(zoo_folder, tmp_path, "hogs", HOG)
    with pytest.raises(SystemExit) as info:  # one model under a limit: a child of its own, the usual Error/Hint
        main(["scan", hog, "--trust-remote-code", "--memory-limit", "100MB"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "went over the memory limit" in err and "raise --memory-limit" in err
    with pytest.raises(SystemExit) as info:
        main(["scan", hog, "--memory-limit", "lots"])
    assert info.value.code == 2 and "--memory-limit 'lots' is not a size" in capsys.readouterr().err
    assert memory_limit("2GiB", 1, fleet=False) == 2 * 2**30 and memory_limit("none", 4, fleet=True) is None
    assert memory_limit("auto", 1, fleet=False) is None  # one model in this process: no limit unless asked
    assert 0 < memory_limit("auto", 4, fleet=True) < memory_limit("auto", 1, fleet=True)


def test_one_model_whose_code_sleeps_ends_at_its_timeout(zoo_folder, tmp_path, capsys):
    """A single scan runs in a child too: --timeout holds for one model, not only for fleets (it used to run until
    killed from outside)."""
    import time

    from loadguard.cli import main

    hang = _with_code(zoo_folder, tmp_path, "sleeps", "import time\ntime.sleep(600)")
    start = time.perf_counter()
    with pytest.raises(SystemExit) as info:
        main(["scan", hang, "--trust-remote-code", "--timeout", "5"])
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    assert info.value.code == 2 and seconds < 60, seconds
    assert "Error: its scan did not finish: timed out after 5 s (killed)" in " ".join(err.split())
    assert "raise --timeout (now 5 s)" in " ".join(err.split())


def _allocate(megabytes: int) -> int:
    """In the child: allocate and touch ``megabytes``, hold them a moment, report the size."""
    import time

    import torch

    held = torch.ones(megabytes * 2**20 // 4)
    time.sleep(1.0)
    return held.numel() * 4


@pytest.mark.skipif(
    _forks.added() is None, reason="no /proc/self/smaps_rollup here: the limit falls back to resident memory"
)
@pytest.mark.parametrize(("limit_mb", "killed"), [(192, True), (320, False)])
def test_the_memory_limit_counts_what_the_child_adds_not_what_it_inherits(limit_mb, killed):
    """A child that allocates 256 MB: killed under a 192 MB limit, not under 320 MB, on CPU and CUDA builds of torch alike
    (a CUDA build's libraries, resident in the parent and not mapped into the child by fork, used to hide ~330 MB)."""
    import torch

    (outcome,) = _forks.run(_allocate, [256], timeout=60, memory_limit=limit_mb * 2**20)
    build = f"torch {torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU'})"
    if killed:
        assert (
            not outcome.ok
            and "went over the memory limit" in outcome.error
            and f"limit {limit_mb:.1f} MiB" in outcome.error
        ), build
    else:
        assert outcome.ok and outcome.value == 256 * 2**20, (build, outcome.error)


def test_a_fresh_child_adds_next_to_nothing():
    (outcome,) = _forks.run(lambda _: _forks.added(), [None], timeout=60)
    assert outcome.ok and outcome.value is not None and outcome.value < 64 * 2**20


def test_scan_many_is_the_fleet_in_python(zoo_folder, tmp_path):
    import loadguard

    missing = str(tmp_path / "no-such-model")
    rows = loadguard.scan_many(
        [str(zoo_folder("np_buffer")), str(zoo_folder("clean")), missing], trust_remote_code=True, jobs=2
    )
    assert [row.model for row in rows] == [str(zoo_folder("np_buffer")), str(zoo_folder("clean")), missing]
    broken, clean, unloadable = rows
    assert isinstance(broken, loadguard.Row) and broken.checked and all(f.predicted for f in broken.findings)
    if IS_V5:  # transformers 4 keeps the buffers: nothing to predict there
        assert not broken.ok and {f.tensor for f in broken.failures} >= {"positions.index", "positions.table"}
    assert clean.ok and unloadable.checked is False and unloadable.error and unloadable.hint
    with pytest.raises(Exception):  # frozen: results are data
        broken.model = "x"


def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "loadguard", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["audit", "compare", "trace"])
def test_single_model_commands_honour_the_memory_limit(zoo_folder, tmp_path, command):
    hog = _with_code(zoo_folder, tmp_path, f"hog_{command}", HOG.replace("time.sleep(60)", "time.sleep(30)"))
    done = _cli(command, hog, "--trust-remote-code", "--memory-limit", "200MB")
    assert done.returncode == 2 and "went over the memory limit" in done.stderr and "limit 190.7 MiB" in done.stderr, (
        done.stderr[-1500:]
    )
    assert "Hint: raise --memory-limit if the model only needs more" in done.stderr


def test_single_model_commands_honour_the_timeout_and_run_within_limits(zoo_folder, tmp_path):
    sleeper = _with_code(zoo_folder, tmp_path, "sleeps", "import time\ntime.sleep(120)")
    done = _cli("audit", sleeper, "--trust-remote-code", "--timeout", "5")
    assert done.returncode == 2 and "timed out after 5 s (killed)" in done.stderr and "raise --timeout" in done.stderr
    within = _cli(
        "audit",
        str(zoo_folder("clean")),
        "--trust-remote-code",
        "--timeout",
        "120",
        "--memory-limit",
        "4GB",
        "--format",
        "json",
    )
    assert within.returncode == 0 and within.stdout.lstrip().startswith("{") and '"ok": true' in within.stdout


def test_an_interrupted_fleet_resumes_with_only_the_rest(zoo_folder, tmp_path):
    """Killed while the third model's code hangs, the run left two rows in the resume file; run again, it scans the third
    only (the first two keep the rows they had: marked here so a rescan would show)."""
    import json
    import signal
    import subprocess
    import sys
    import time

    sleeper = _with_code(zoo_folder, tmp_path, "sleeps", "import time\ntime.sleep(120)")
    first, second = str(zoo_folder("clean")), str(zoo_folder("np_buffer"))
    resume = tmp_path / "rows.jsonl"
    command = [
        sys.executable,
        "-m",
        "loadguard",
        "scan",
        first,
        second,
        sleeper,
        "--trust-remote-code",
        "--jobs",
        "1",
        "--resume",
        str(resume),
    ]
    running = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not resume.exists() or len(resume.read_text().splitlines()) < 2):
        time.sleep(0.2)
    os.killpg(running.pid, signal.SIGKILL)
    running.wait()
    rows = [json.loads(line) for line in resume.read_text().splitlines()]
    assert [row["model"] for row in rows] == [first, second]
    marked = [{**row, "model_class": f"{row['model_class']}-from-the-first-run"} for row in rows]
    resume.write_text(
        "".join(json.dumps(row) + "\n" for row in marked) + '{"model": "cut sh'
    )  # a line the kill cut short
    done = subprocess.run(
        [*command, "--timeout", "5", "--format", "json"], capture_output=True, text=True, timeout=300
    )
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["model"] for row in out] == [first, second, sleeper]
    assert [row.get("model_class", "").endswith("-from-the-first-run") for row in out] == [True, True, False]
    assert out[2]["ok"] is False and out[2]["error"]["kind"] == "TimeoutExceeded"
    assert "resuming from" in done.stderr and "2 of 3 model(s) already scanned there, 1 to go" in done.stderr
    assert done.returncode == 3
    kept = []
    for line in resume.read_text().splitlines():
        try:
            kept.append(json.loads(line)["model"])
        except ValueError:
            pass
    assert kept == [first, second, sleeper]  # the new row was not glued to the cut line


@pytest.mark.skipif(_forks.added() is None, reason="no /proc/self/smaps_rollup here")
def test_the_cheap_memory_bound_is_never_below_what_a_child_adds_and_spares_the_slow_read(monkeypatch):
    """``held_at_most`` (VmRSS + VmSwap, ~0.02 ms) bounds ``added`` (smaps_rollup, ~5 ms) from above, so a child far
    under its limit is never read the slow way: the pool read smaps_rollup every 50 ms for each child, which took a
    fifth of a core from a 2-core fleet (the native sweep ran 1.2x slower than the release before)."""
    assert _forks.held_at_most() >= _forks.added() > 0
    slow_reads = []
    real = _forks.added
    monkeypatch.setattr(_forks, "added", lambda pid="self": slow_reads.append(pid) or real(pid))
    (outcome,) = _forks.run(_allocate, [64], timeout=60, memory_limit=1 << 40)
    assert outcome.ok and outcome.value == 64 * 2**20
    assert [pid for pid in slow_reads if pid != "self"] == []
