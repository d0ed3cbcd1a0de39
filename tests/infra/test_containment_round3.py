"""Containment, round 3 (issue 45, classes 1, 2 and 6): a model's code that ends loadguard's process is an error, never a
silent success; what it starts, the signal dispositions and the working folder it changes do not outlive its load;
`fix` runs it only in a child of its own (``--timeout``, ``--memory-limit``) and leaves no staging folder of a dead
run. Each is run as a user runs the command (``python -m loadguard``) and checked with /proc."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import loadguard
from loadguard._infra import procs
from loadguard.errors import ModelCodeExitedError

from ..conftest import IS_V5, TRANSFORMERS_VERSION
from .test_containment import _alive

linux = pytest.mark.skipif(sys.platform != "linux", reason="process containment is proven with /proc (Linux)")
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads np_buffer right")


def _with_init(zoo_folder, tmp_path: Path, name: str, body: str) -> Path:
    """np_buffer, its model class's ``__init__`` running ``body`` first."""
    folder = tmp_path / name
    shutil.copytree(zoo_folder("np_buffer"), folder)
    indented = "\n".join("    " + line for line in body.strip().splitlines())
    code = (
        "\n\n_plain_init = LgToyForCausalLM.__init__\n\n\ndef _hostile_init(self, config, *args, **kwargs):\n"
        f"    import os, signal, subprocess, sys, time\n{indented}\n    _plain_init(self, config, *args, **kwargs)\n\n\n"
        "LgToyForCausalLM.__init__ = _hostile_init\n"
    )
    (folder / "modeling_lgtoy.py").write_text((folder / "modeling_lgtoy.py").read_text() + code)
    return folder


def _loadguard(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOADGUARD_DEBUG": ""}
    return subprocess.run(
        [sys.executable, "-m", "loadguard", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@linux
@pytest.mark.parametrize("how", ["os._exit(0)", "sys.exit(0)"])
def test_model_code_that_ends_the_process_is_an_error_never_a_success(zoo_folder, tmp_path, how):
    folder = _with_init(zoo_folder, tmp_path, "exiting", how)
    audited = _loadguard("audit", str(folder), "--trust-remote-code", "--format", "json", cwd=tmp_path)
    said = f"the model's code called {how.split('(')[0]}(0) while loading"
    assert audited.returncode == 2 and said in audited.stderr
    assert json.loads(audited.stdout)["error"]["message"].startswith(said)  # the JSON says it too: never empty
    fixed = _loadguard("fix", str(folder), "--out", str(tmp_path / "out"), "--trust-remote-code", cwd=tmp_path)
    assert fixed.returncode == 2 and "the model's code called" in fixed.stderr
    assert not (tmp_path / "out").exists()


@linux
def test_what_model_code_starts_changes_or_ignores_in_audit_does_not_outlive_it(zoo_folder, tmp_path):
    """A ``sleep`` in a session of its own, ``SIGTERM`` ignored and ``os.chdir('/')`` while the model is built, the
    model given as a relative folder: the load still reads its weights, and the command ends with no process left."""
    pids = tmp_path / "pids"
    pids.mkdir()
    body = f"""
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
open(os.path.join({str(pids)!r}, f"{{child.pid}}.pid"), "w").write(str(child.pid))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.chdir("/")
"""
    _with_init(zoo_folder, tmp_path, "leaving", body)
    audited = _loadguard("audit", "leaving", "--trust-remote-code", "--format", "json", cwd=tmp_path)
    assert audited.returncode == (1 if IS_V5 else 0), audited.stderr
    assert "corrupt or truncated" not in audited.stderr and '"model": "leaving"' in audited.stdout
    started = [int(p.stem) for p in pids.glob("*.pid")]
    assert started and "process(es) the model's code left running" in audited.stderr
    time.sleep(0.2)
    assert [pid for pid in started if _alive(pid)] == []


def test_a_load_gives_back_the_working_folder_and_signal_dispositions(tmp_path):
    before, handler = os.getcwd(), signal.getsignal(signal.SIGTERM)
    with procs.exits_refused("loading x"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.chdir(tmp_path)
    assert os.getcwd() == before and signal.getsignal(signal.SIGTERM) is handler
    with pytest.raises(ModelCodeExitedError, match=r"sys.exit\(3\) while loading x"):
        with procs.exits_refused("loading x"):
            sys.exit(3)
    real = os._exit
    with pytest.raises(ModelCodeExitedError, match=r"os._exit\(0\)"):
        with procs.exits_refused("loading x"):
            os._exit(0)
    assert os._exit is real


@linux
def test_fix_has_a_timeout_that_stops_the_model_and_says_so(zoo_folder, tmp_path):
    folder = _with_init(zoo_folder, tmp_path, "slow", "time.sleep(120)")
    start = time.monotonic()
    fixed = _loadguard(
        "fix", str(folder), "--out", str(tmp_path / "out"), "--trust-remote-code", "--timeout", "3", cwd=tmp_path
    )
    assert fixed.returncode == 2 and time.monotonic() - start < 60
    assert "the fix did not finish" in fixed.stderr and "--timeout" in fixed.stderr
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if ".loadguard-fix-" in p.name]


@needs_v5
def test_a_staging_folder_a_killed_run_left_is_removed_by_the_next(zoo_folder, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process has now
    stale = tmp_path / f".fixed.loadguard-fix-{dead.pid}-0123abcd"
    (stale / "half").mkdir(parents=True)
    alive = tmp_path / f".other.loadguard-fix-{os.getppid()}-0123abcd"  # a run still going: kept
    alive.mkdir()
    result = loadguard.fix(zoo_folder("np_buffer"), tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert result.status == "unverified" and (tmp_path / "fixed" / "modeling_lgtoy.py").is_file()
    assert not stale.exists() and alive.exists()


def test_inputs_that_crashed_a_run_are_rows_or_one_clear_error(tmp_path, zoo_folder):
    """Issue 45, class 5: a --from line longer than a file name may be, a resume file with a byte that is not UTF-8 and a
    line nested past the JSON reader's depth, a config.json nested 100,000 deep."""
    listed = tmp_path / "models.txt"
    listed.write_text("a" * 300 + "\nlg-org/missing\n")
    scanned = _loadguard("scan", "--from", str(listed), "--format", "json", cwd=tmp_path)
    rows = [json.loads(line) for line in scanned.stdout.splitlines()]  # a fleet: one JSON row per line
    assert "unexpected" not in scanned.stderr and [r["scanned"] for r in rows] == [False, False]
    assert rows[0]["error"]["message"].endswith("does not exist")
    resume = tmp_path / "resume.jsonl"
    resume.write_bytes(b'{"model": "\xff"}\n' + b"[" * 100_000 + b"\n")
    again = _loadguard("scan", "--from", str(listed), "--resume", str(resume), "--format", "json", cwd=tmp_path)
    assert "unexpected" not in again.stderr and len(again.stdout.splitlines()) == 2
    deep = tmp_path / "deep"
    shutil.copytree(zoo_folder("np_buffer"), deep)
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    audited = _loadguard("audit", str(deep), "--trust-remote-code", cwd=tmp_path)
    assert audited.returncode == 2 and "nested deeper than any config's" in audited.stderr
    assert "unexpected" not in audited.stderr


def test_a_diff_of_a_file_whose_name_has_a_space_applies(tmp_path):
    from loadguard._fix.checks import diff_of as _diff

    diff = _diff({"my file.py": "x = 1\n"}, {"my file.py": "x = 2\n"})
    (tmp_path / "my file.py").write_text("x = 1\n")
    subprocess.run(["patch", "-p1"], input=diff, text=True, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "my file.py").read_text() == "x = 2\n"


@needs_v5
def test_the_weights_are_linked_said_so_or_copied_when_asked(zoo_folder, tmp_path, capsys):
    """Issue 45, class 4: hard-linked weights written in place change the original (a Hub cache blob): the output says
    how the copy holds them, --copy-weights gives it its own; large data (.npy) is linked, not copied."""
    from ..conftest import run_cli

    folder = tmp_path / "model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    (folder / "table.npy").write_bytes(b"\x93NUMPY" + bytes(64))
    code, _, err = run_cli(
        capsys, "fix", str(folder), "--out", str(tmp_path / "linked"), "--trust-remote-code", "--no-verify"
    )
    same = [
        os.stat(tmp_path / "linked" / n).st_ino == os.stat(folder / n).st_ino
        for n in ("model.safetensors", "table.npy")
    ]
    assert code == 1 and same == [True, True] and "hard links to the original's files" in err
    result = loadguard.fix(folder, tmp_path / "copied", trust_remote_code=True, verify=False, copy_weights=True)
    copied = tmp_path / "copied" / "model.safetensors"
    assert result.weights == "copied" and os.stat(copied).st_ino != os.stat(folder / "model.safetensors").st_ino
    assert copied.read_bytes() == (folder / "model.safetensors").read_bytes()


def test_an_out_that_cannot_be_written_is_refused_before_the_model_runs(zoo_folder, tmp_path):
    ran = tmp_path / "ran"
    folder = _with_init(zoo_folder, tmp_path, "model", f"open({str(ran)!r}, 'w').close()")
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(loadguard.errors.InvalidOptionError, match="cannot write in"):
        loadguard.fix(folder, tmp_path / "a-file" / "out", trust_remote_code=True)
    assert not ran.exists()


@needs_v5
def test_a_well_shaped_forged_or_stale_resume_row_is_done_again(zoo_folder, tmp_path, capsys):
    """Issue 45, class 5: a resume row whose checks say "4 of 4 failed" next to no finding, or one scanned from files
    the folder no longer holds, is never trusted as "predicted clean"; a genuine one is."""
    from ..conftest import run_cli

    folder = tmp_path / "model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    resume = tmp_path / "rows.jsonl"
    scan = (
        "scan",
        str(folder),
        "--from",
        os.devnull,
        "--trust-remote-code",
        "--resume",
        str(resume),
        "--format",
        "json",
    )
    code, out, _ = run_cli(capsys, *scan)
    genuine = json.loads(out)
    assert code == 1 and genuine["files_sha256"] and len(genuine["findings"]) == 4
    code, _, err = run_cli(capsys, *scan)
    assert code == 1 and "resuming from" in err and "not trusted" not in err  # the genuine row stands
    forged = {**genuine, "findings": [], "ok": True}
    resume.write_text(json.dumps(forged) + "\n")
    code, out, err = run_cli(capsys, *scan)
    assert code == 1 and "1 row(s) of the wrong shape, not trusted: done again" in err
    assert len(json.loads(out)["findings"]) == 4
    resume.write_text(json.dumps(genuine) + "\n")
    os.utime(folder / "modeling_lgtoy.py", ns=(1, 1))  # the code changed since that row
    code, _, err = run_cli(capsys, *scan)
    assert code == 1 and "not trusted: done again" in err


@linux
def test_a_thread_the_model_code_leaves_running_does_not_hold_the_command(zoo_folder, tmp_path):
    """Issue 45, class 2: a non-daemon thread started while the model loads would keep the interpreter alive after
    the report (a CI step waiting on it hangs); the command ends with its own exit code and says so."""
    body = "import threading\nthreading.Thread(target=time.sleep, args=(300,)).start()"
    folder = _with_init(zoo_folder, tmp_path, "threads", body)
    start = time.monotonic()
    audited = _loadguard("audit", str(folder), "--trust-remote-code", cwd=tmp_path, timeout=120)
    assert audited.returncode == (1 if IS_V5 else 0) and time.monotonic() - start < 100
    assert "thread(s) the model's code started still running" in audited.stderr


@linux
def test_model_code_that_exits_in_its_forward_is_an_error_in_trace(zoo_folder, tmp_path):
    folder = tmp_path / "exits-in-forward"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    code = "\n\ndef _exiting_forward(self, *args, **kwargs):\n    import os\n\n    os._exit(0)\n\n\nLgToyForCausalLM.forward = _exiting_forward\n"
    (folder / "modeling_lgtoy.py").write_text((folder / "modeling_lgtoy.py").read_text() + code)
    traced = _loadguard("trace", str(folder), "--trust-remote-code", cwd=tmp_path)
    assert traced.returncode == 2 and "the model's code called os._exit(0) while running" in traced.stderr


_WHERE = """
with open(os.path.join({folder!r}, f"{{os.getpid()}}.where"), "w") as where:
    where.write(f"{{os.getppid()}} {{os.getpgid(0)}}")
"""


@linux
@pytest.mark.parametrize("command", ["audit", "trace"])
def test_the_model_code_of_a_command_runs_in_a_child_of_its_own(zoo_folder, tmp_path, command, capsys):
    """Issue 45, class 2: audit, compare and trace run the model's code in a child of the ``loadguard`` process (its
    own process group), from the command line and from Python, so nothing it starts, ignores or changes is shared."""
    from ..conftest import run_cli

    where = tmp_path / "where"
    where.mkdir()
    folder = _with_init(zoo_folder, tmp_path, f"where-{command}", _WHERE.format(folder=str(where)))
    run = subprocess.Popen(
        [sys.executable, "-m", "loadguard", command, str(folder), "--trust-remote-code"],
        cwd=tmp_path,
        env={**os.environ, "LOADGUARD_DEBUG": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = run.communicate(timeout=300)
    assert run.returncode in (0, 1), err
    assert out.strip() and (command == "trace" or folder.name in out)  # the child's report reached its stdout
    (seen,) = where.glob("*.where")
    parent, group = map(int, seen.read_text().split())
    assert int(seen.stem) != run.pid and parent == run.pid and group == int(seen.stem)
    seen.unlink()

    code, out, _ = run_cli(capsys, command, str(folder), "--trust-remote-code", "--format", "json")
    assert code in (0, 1) and json.loads(out)["model"] == str(folder)  # a capture without a descriptor: relayed
    (seen,) = where.glob("*.where")
    assert int(seen.stem) != os.getpid() and int(seen.read_text().split()[0]) == os.getpid()


@linux
def test_a_model_that_ignores_sigterm_is_stopped_with_the_command(zoo_folder, tmp_path):
    """The model's code ignores SIGTERM and sleeps while it is built: before, the ``loadguard`` process itself ignored
    SIGTERM (its load ran there) and ran on; now the command ends by the signal, and the model's process with it."""
    ready = tmp_path / "ready"
    body = f"""
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open({str(ready)!r}, "w").write(str(os.getpid()))
time.sleep(300)
"""
    folder = _with_init(zoo_folder, tmp_path, "deaf", body)
    run = subprocess.Popen(
        [sys.executable, "-m", "loadguard", "audit", str(folder), "--trust-remote-code"],
        cwd=tmp_path,
        env={**os.environ, "LOADGUARD_DEBUG": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)
    model = int(ready.read_text())
    run.send_signal(signal.SIGTERM)
    try:
        _, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == -signal.SIGTERM
    assert "stopped by SIGTERM; every process this run started was stopped with it" in err
    time.sleep(0.2)
    assert not _alive(model)


@linux
def test_after_cuda_work_a_call_from_python_runs_in_its_own_process(zoo_folder, tmp_path, capsys, monkeypatch):
    """A forked child cannot use the CUDA its parent started: main() called from Python after CUDA work runs the
    command in its own process (as the Python API does), and refuses the limits that need a child, saying why."""
    import torch

    from ..conftest import run_cli

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    where = tmp_path / "where"
    where.mkdir()
    folder = _with_init(zoo_folder, tmp_path, "where-cuda", _WHERE.format(folder=str(where)))
    code, _, _ = run_cli(capsys, "audit", str(folder), "--trust-remote-code", "--format", "json")
    assert code in (0, 1) and [int(p.stem) for p in where.glob("*.where")] == [os.getpid()]
    code, _, err = run_cli(capsys, "audit", str(folder), "--trust-remote-code", "--timeout", "60")
    assert code == 2 and "cannot use CUDA once this process has started it" in err
