"""Containment, round 2 (issue 35): input under an attacker's control -- a model's code, its folder's name, its config,
its files, a settings file, a resume file, signals -- never leaves a process running, never reaches a terminal or a CI
log raw, never moves where output lands, never prints a file's bytes, never crashes the run (tests/e2e/test_hostile.py:
configs and module trees)."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadguard._infra import forks as _forks
from loadguard._infra import procs as _procs
from loadguard._scan import scan_fleet
from loadguard.cli._limits import memory_limit

from ..conftest import IS_V5, TRANSFORMERS_VERSION, run_cli

needs_v5 = pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads these models right: no finding to carry"
)

linux = pytest.mark.skipif(sys.platform != "linux", reason="process containment is proven with /proc (Linux)")
OPTIONS = {"trust_remote_code": True, "keys": "auto", "workarounds": [], "placement": {}}


def _with_code(zoo_folder, tmp_path, name: str, code: str) -> str:
    folder = tmp_path / name
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    modeling.write_text(modeling.read_text() + "\n" + code + "\n")
    return str(folder)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pids(folder: Path, count: int, within: float = 90) -> list[int]:
    """The pids the model's code wrote into ``folder`` (one file each), once ``count`` are there."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        files = sorted(folder.glob("*.pid"))
        texts = [f.read_text().strip() for f in files]
        if len(files) >= count and all(texts):
            return [int(t) for t in texts]
        time.sleep(0.1)
    raise AssertionError(f"the model's code did not start ({len(list(folder.glob('*.pid')))} of {count} pids)")


def _none_alive(pids: list[int], within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def _stopped(
    command: list[str], pid_dir: Path, count: int, number: int, env: dict | None = None, ready=None
) -> tuple[int, str, list[int]]:
    """``command`` in a session of its own, sent ``number`` once the model's code wrote ``count`` pids into ``pid_dir``
    (and ``ready()`` holds): its exit status, its stderr and those pids."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    try:
        pids = _pids(pid_dir, count)
        if ready is not None:
            ready()
        process.send_signal(number)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err.decode(), pids


# The model's code: a descendant that leaves the process group (setsid) and waits forever, then the model hangs.
FORK_AND_HANG = """
import os, time
_DIR = os.environ["LG_PID_DIR"]
def _write(name):
    with open(os.path.join(_DIR, name + ".tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(_DIR, name + ".tmp"), os.path.join(_DIR, name + ".pid"))
if os.fork() == 0:
    os.setsid()
    _write("grandchild")
    time.sleep(600)
    os._exit(0)
_write("child")
time.sleep(600)
"""


@linux
@pytest.mark.skipif(not _forks.available(), reason="needs os.fork")
@pytest.mark.parametrize(
    "how",
    [
        "SIGTERM",
        "SIGKILL",
        pytest.param("SIGHUP", marks=pytest.mark.slow),
        pytest.param("SIGINT", marks=pytest.mark.slow),
    ],
)
def test_no_process_outlives_a_run_whatever_ends_it(zoo_folder, tmp_path, how):
    """A scan whose model forked a descendant (its own session) and hangs: the run is ended by a signal; 5 s later
    nothing it started runs (SIGKILL: the children notice their parent is gone)."""
    folder = _with_code(zoo_folder, tmp_path, f"hangs_{how.lower()}", FORK_AND_HANG)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = {**os.environ, "LG_PID_DIR": str(pid_dir), "PYTHONUNBUFFERED": "1"}
    number = getattr(signal, how)
    code, err, pids = _stopped(
        [sys.executable, "-m", "loadguard", "scan", folder, "--trust-remote-code", "--timeout", "300"],
        pid_dir,
        2,
        number,
        env,
    )
    assert _none_alive(pids) == [], f"alive 5 s after {how}: {pids}"
    if how in ("SIGTERM", "SIGHUP"):  # ends by the very signal, after saying so
        assert code == -number and f"stopped by {how}" in err
    elif how == "SIGINT":
        assert code == 2 and "interrupted" in err


@linux
@pytest.mark.skipif(not _forks.available(), reason="needs os.fork")
def test_a_fleet_stopped_by_sigterm_leaves_nothing(zoo_folder, tmp_path):
    first = _with_code(zoo_folder, tmp_path, "fleet_a", FORK_AND_HANG)
    second = _with_code(
        zoo_folder,
        tmp_path,
        "fleet_b",
        FORK_AND_HANG.replace('"grandchild"', '"grandchild_b"').replace('"child"', '"child_b"'),
    )
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = {**os.environ, "LG_PID_DIR": str(pid_dir)}
    code, _, pids = _stopped(
        [sys.executable, "-m", "loadguard", "scan", first, second, "--trust-remote-code", "--jobs", "2"],
        pid_dir,
        4,
        signal.SIGTERM,
        env,
    )
    assert code == -signal.SIGTERM
    assert _none_alive(pids) == []


@linux
@pytest.mark.skipif(not _forks.available(), reason="needs os.fork")
def test_what_a_models_code_leaves_running_is_killed_and_its_row_says_so(zoo_folder, tmp_path, monkeypatch):
    """The scan finishes; a process its code started (in a session of its own) is still running: the pool kills it and
    the row counts it. A second model whose code forks and lets the copy run on through the scan gets one row."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.setenv("LG_PID_DIR", str(pid_dir))
    lingers = _with_code(zoo_folder, tmp_path, "lingers", FORK_AND_HANG.rsplit('_write("child")', 1)[0])
    copies = _with_code(zoo_folder, tmp_path, "copies", "import os\n_COPY = os.fork()")
    start = time.monotonic()
    rows = scan_fleet([lingers, copies], OPTIONS, jobs=1, timeout=120)
    assert time.monotonic() - start < 100  # nobody waited for the lingering process
    assert rows[0]["scanned"] is True and rows[0]["left_behind"] == 1
    assert rows[1]["scanned"] is True and len(rows) == 2  # the copy never reported a row of its own
    (grandchild,) = _pids(pid_dir, 1)
    assert _none_alive([grandchild]) == []


@linux
@pytest.mark.skipif(not _forks.available(), reason="needs os.fork")
def test_a_timeout_kills_what_left_the_process_group(zoo_folder, tmp_path, monkeypatch):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.setenv("LG_PID_DIR", str(pid_dir))
    hangs = _with_code(zoo_folder, tmp_path, "hangs_timeout", FORK_AND_HANG)
    (row,) = scan_fleet([hangs], OPTIONS, jobs=1, timeout=10)
    assert row["scanned"] is False and "timed out after 10 s" in row["error"]
    assert _none_alive(_pids(pid_dir, 2)) == []


def test_the_pool_child_dies_with_its_parent():
    """A child sees EOF on its lifeline when the process that forked it is gone, and ends (with what it started)."""
    if not _forks.available() or sys.platform != "linux":
        pytest.skip("needs fork and /proc")
    script = (
        "import os, sys, time\n"
        "from loadguard._infra import forks as _forks\n"
        "def work(_):\n"
        "    print(os.getpid(), flush=True)\n"
        "    time.sleep(600)\n"
        "_forks.run(work, [None])\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    child = int(process.stdout.readline())
    assert _alive(child)
    process.kill()
    process.wait()
    assert _none_alive([child]) == []


# -- text a model controls ---------------------------------------------------------------------------------------------

HOSTILE = "evil\n::error::pwned\n::stop-commands::x\x1b[2J\x1b]0;title\x07\x1b]8;;http://x\x07link\x1b]8;;\x07\r[red]red[/red]"


def _clean_lines(text: str) -> None:
    """No control character but newline, no line a model's text starts."""
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in text), repr(text)
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), line


@needs_v5
def test_a_hostile_folder_name_reaches_no_output_raw(zoo_folder, tmp_path, capsys):
    missing = str(tmp_path / HOSTILE)
    code, out, err = run_cli(capsys, "audit", missing)
    assert code == 2 and "\\x1b[2J" in err and "\\n::error::pwned" in err
    _clean_lines(out + err)
    folder = tmp_path / ("n" + HOSTILE)
    shutil.copytree(zoo_folder("np_buffer"), folder)
    for args in (
        ["scan", str(folder), "--trust-remote-code"],
        ["scan", str(folder), str(folder), "--trust-remote-code"],
    ):
        code, out, err = run_cli(capsys, *args)
        assert code == 1, err
        _clean_lines(out + err)
        assert "positions.index" in out and "\\n::error::pwned" in out


def test_a_config_value_with_escapes_reaches_stderr_escaped(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"model_type": "lg\x1b]0;title\x07\x1b[2Jtype", "architectures": ["X"]})
    )
    code, out, err = run_cli(capsys, "audit", str(folder))
    assert code == 2
    _clean_lines(out + err)
    assert "\\x1b" in err


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_every_text_through_the_console_is_one_line_without_controls(text):
    from rich.table import Table

    from loadguard._infra.text import styled
    from loadguard.cli._consoles import SafeConsole

    console = SafeConsole(file=io.StringIO(), width=100_000, soft_wrap=True, color_system=None, force_terminal=True)
    console.print(styled("[bold]Error:[/] {}", text), highlight=False)
    table = Table()
    table.add_column("model", overflow="fold")
    table.add_row(text)
    console.print(table)
    output = console.file.getvalue()
    _clean_lines(output)
    lines = output.splitlines()
    assert lines[0].startswith("Error: ") and len(lines) == 1 + 5  # one line, then a table of one row
    assert "[" not in text or "[" in output  # brackets in the text are text
    assert "\x1b]8" not in output


# -- model code that moves the ground ----------------------------------------------------------------------------------


@needs_v5
def test_model_code_that_changes_directory_moves_no_output(zoo_folder, tmp_path, capsys, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = _with_code(zoo_folder, tmp_path, "moves", f"import os\nos.chdir({str(elsewhere)!r})")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "summary.md")
    code, out, err = run_cli(
        capsys, "audit", moved, "--trust-remote-code", "--reproducer", "repro", "--format", "github"
    )
    assert code == 1, err
    assert os.getcwd() == str(home)  # back where the user was before anything was written
    assert (home / "repro").is_dir() and "positions.index" in (home / "summary.md").read_text()
    code, out, err = run_cli(
        capsys, "audit", moved, "--trust-remote-code", "--baseline", "base.json", "--write-baseline"
    )
    assert code == 0, err
    assert (home / "base.json").is_file()
    assert sorted(p.name for p in elsewhere.iterdir()) == []


# -- files that are not what they seem ---------------------------------------------------------------------------------


def _linked_checkpoint(zoo_folder, tmp_path) -> tuple[Path, Path]:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n" * 4)
    folder = tmp_path / "linked"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(secret)
    return folder, secret


def test_a_checkpoint_linked_to_a_secret_prints_none_of_its_bytes(zoo_folder, tmp_path, capsys):
    folder, secret = _linked_checkpoint(zoo_folder, tmp_path)
    number = str(int.from_bytes(secret.read_bytes()[:8], "little"))
    code, out, err = run_cli(capsys, "audit", str(folder), "--trust-remote-code")
    assert code == 2 and number not in out + err and "root:x" not in out + err
    assert f"a link to {secret}" in err and "outside the model's folder" in err


def test_the_weightless_scan_refuses_links_leaving_the_folder_unless_told(zoo_folder, tmp_path, capsys):
    folder, secret = _linked_checkpoint(zoo_folder, tmp_path)
    code, out, err = run_cli(capsys, "scan", str(folder), "--trust-remote-code")
    assert (
        code == 2 and f"is a link to {secret}, outside the model's folder: refused" in err and "--follow-links" in err
    )
    code, out, err = run_cli(capsys, "scan", str(folder), "--trust-remote-code", "--follow-links")
    assert code == 2 and "is not a readable safetensors file" in err and "refused" not in err
    assert str(int.from_bytes(secret.read_bytes()[:8], "little")) not in err


def test_a_hub_snapshots_links_to_its_blobs_are_its_own(tmp_path):
    from loadguard._infra.paths import leaving

    snapshot = tmp_path / "models--org--name" / "snapshots" / "abc"
    blobs = tmp_path / "models--org--name" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    (blobs / "123").write_text("{}")
    (snapshot / "config.json").symlink_to(blobs / "123")
    assert leaving(snapshot, snapshot / "config.json") is None
    (snapshot / "model.safetensors").symlink_to(tmp_path / "elsewhere")
    assert leaving(snapshot, snapshot / "model.safetensors") == (tmp_path / "elsewhere").resolve()
    assert leaving(snapshot, snapshot / "plain.json") is None


# -- settings and resume files -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, says",
    [
        ('[tool.loadguard]\nformat = "json\n', "is not valid TOML"),
        ("[tool.loadguard]\ntimeout = inf\n", "timeout = inf must be a finite number of seconds"),
        ("[tool.loadguard]\ntimeout = nan\n", "timeout = nan must be a finite number of seconds"),
        ("[tool.loadguard]\ntimeout = -1\n", "timeout = -1.0 must be a finite number of seconds, at least 1"),
        ("[tool.loadguard]\njobs = 100000\n", "jobs = 100000 must be between 1 and 256"),
        ('[tool.loadguard]\nmemory-limit = "-5GB"\n', "memory-limit = '-5GB' is not a size"),
        ('[tool]\nloadguard = "x"\n', "tool.loadguard is a str, not a table"),
        ("[tool.loadguard]\nplugin = 3\n", "plugin = 3 is not a string"),
    ],
)
def test_a_bad_settings_table_is_one_error_in_its_own_words(tmp_path, capsys, monkeypatch, body, says):
    (tmp_path / "pyproject.toml").write_text(body)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "config")
    assert code == 2 and says in err and str(tmp_path / "pyproject.toml") in err, err
    assert "unexpected" not in err


def test_a_broken_pyproject_that_does_not_name_loadguard_is_not_ours(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "config")
    assert code == 0, err


@pytest.mark.parametrize(
    "text, size", [("2G", 2 * 2**30), ("2GiB", 2 * 2**30), ("2048M", 2 * 2**30), ("4GB", 4 * 10**9), ("512MiB", 2**29)]
)
def test_memory_limit_takes_the_spellings_users_type(text, size, tmp_path, capsys, monkeypatch):
    assert memory_limit(text, 1, fleet=False) == size
    (tmp_path / "pyproject.toml").write_text(f'[tool.loadguard]\nmemory-limit = "{text}"\n')
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "config")
    assert code == 0, err


@pytest.mark.parametrize(
    "bad",
    [
        {"scanned": "maybe"},
        {"scanned": True},
        {
            "scanned": True,
            "model_class": "X",
            "findings": [{"tensor": 1}],
            "checks": [],
            "workarounds": [],
            "checkpoint": None,
        },
        {"scanned": False},
    ],
)
def test_a_resume_row_of_the_wrong_shape_is_done_again_never_trusted(tmp_path, capsys, bad):
    target = str(tmp_path / "no-such-model")
    resume = tmp_path / "rows.jsonl"
    resume.write_text(json.dumps({"model": target, **bad}) + "\n")
    code, out, err = run_cli(capsys, "scan", target, "--from", os.devnull, "--resume", str(resume), "--format", "json")
    assert code == 2, err
    assert "1 row(s) of the wrong shape, not trusted: done again" in err and "unexpected" not in err
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert row["error"]["message"] == f"{target} does not exist"


def test_a_fleet_of_missing_paths_forks_nothing(tmp_path, monkeypatch):
    def no_fork():
        raise AssertionError("forked for a path that does not exist")

    monkeypatch.setattr(os, "fork", no_fork)
    targets = [str(tmp_path / f"missing-{index}") for index in range(200)]
    rows = scan_fleet(targets, OPTIONS, jobs=2)
    assert [row["model"] for row in rows] == targets
    assert all(
        row["scanned"] is False
        and row["error"].endswith("does not exist")
        and row["error_kind"] == "ModelNotFoundError"
        for row in rows
    )


def test_procs_find_descendants_and_sweep_them():
    if sys.platform != "linux":
        pytest.skip("needs /proc")
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        assert sleeper.pid in _procs.descendants()
        assert _procs.sweep() >= 1
        assert _none_alive([sleeper.pid]) == []
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        sleeper.wait()


def test_a_matrix_resume_cell_of_the_wrong_shape_is_not_trusted():
    from loadguard._matrix.matrices import Cell

    good = Cell("m", "5.0.0", "error", error="boom").to_dict()
    assert Cell.valid(good)
    for bad in (
        {**good, "status": "maybe"},
        {**good, "status": "clean", "report": None},
        {**good, "seconds": "x"},
        {"model": "m"},
    ):
        assert not Cell.valid(bad), bad


@linux
@pytest.mark.skipif(not _forks.available(), reason="needs os.fork")
@needs_v5
def test_fix_stopped_by_sigterm_while_proving_leaves_no_folder_and_no_process(zoo_folder, tmp_path):
    """The proof's child hangs in the model's code (its second import); SIGTERM: no staging folder, no output folder,
    no process left."""
    mark = tmp_path / "imported-once"
    folder = _with_code(
        zoo_folder,
        tmp_path,
        "fix_hangs",
        f"""
import os, time
if os.path.exists({str(mark)!r}):
    with open(os.path.join({str(tmp_path)!r}, "proof.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
open({str(mark)!r}, "w").close()
""",
    )
    out = tmp_path / "fixed"

    def staging() -> None:
        assert [p.name for p in tmp_path.iterdir() if "loadguard-fix" in p.name], "no staging folder while proving"

    code, _, (pid,) = _stopped(
        [sys.executable, "-m", "loadguard", "fix", folder, "--out", str(out), "--trust-remote-code"],
        tmp_path,
        1,
        signal.SIGTERM,
        ready=staging,
    )
    assert code == -signal.SIGTERM
    assert _none_alive([pid]) == []
    assert not out.exists() and not [p.name for p in tmp_path.iterdir() if "loadguard-fix" in p.name]
