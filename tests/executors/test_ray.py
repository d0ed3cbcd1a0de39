"""The ``ray`` executor on a real 2-node Ray cluster that these tests start on this machine (`make test-ray`): the same
rows as the local executor, the same limits on its workers, a dead worker retried once then reported, a 2-version
matrix and its diff, and --resume. The cluster is stopped by the process ids of what the tests started."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ..conftest import IS_V5, TRANSFORMERS_VERSION
from ..conftest import run_cli as _cli

ray = pytest.importorskip("ray", reason="the ray extra is not installed: make test-ray installs it")
pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads"),
]
ROOT = Path(__file__).resolve().parents[2]


def _sessions_processes(sessions: set[int]) -> list[int]:
    """Every process whose session is one the tests' `ray start` commands opened (their daemons and workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if (
                int(fields[3]) in sessions and fields[0] != "Z"
            ):  # field 6 of stat: the session id; a zombie is already dead
                found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def cluster():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="lgray", dir="/tmp")  # short: Ray's socket paths must fit in 107 characters
    ray_bin = str(Path(sys.executable).parent / "ray")
    # a cluster of its own: no token from ~/.ray (a local `ray.init()` elsewhere leaves one there), the driver likewise
    settings = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    env.pop("RAY_ADDRESS", None)
    commands = [
        [
            ray_bin,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            '--resources={"head": 1}',
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        [
            ray_bin,
            "start",
            f"--address=127.0.0.1:{port}",
            "--num-cpus=1",
            '--resources={"second": 1}',
            "--disable-usage-stats",
        ],
    ]
    sessions: set[int] = set()
    try:
        for command in commands:
            started = subprocess.Popen(
                command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            sessions.add(started.pid)
            output, _ = started.communicate(timeout=120)
            assert started.returncode == 0, output[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _sessions_processes(sessions):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + (3 if sig == signal.SIGTERM else 15)
            while _sessions_processes(sessions) and time.monotonic() < deadline:
                time.sleep(0.2)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        assert not _sessions_processes(sessions)
        shutil.rmtree(temp, ignore_errors=True)


def test_two_nodes(cluster):
    from loadguard.executors import resolve

    executor = resolve(f"ray:{cluster}")
    assert executor.slots(1) == 2 and len([n for n in ray.nodes() if n["Alive"]]) == 2


def test_a_fleet_on_ray_gives_the_local_rows_and_exit_code(cluster, capsys, zoo_folder, tmp_path):
    names = ["np_buffer", "clean", "missing_key", "overwritten"]
    listing = tmp_path / "models.txt"
    listing.write_text("".join(f"{zoo_folder(name)}\n" for name in names))
    local = _cli(capsys, "scan", "--from", str(listing), "--trust-remote-code", "--format", "json")
    on_ray = _cli(
        capsys,
        "scan",
        "--from",
        str(listing),
        "--trust-remote-code",
        "--format",
        "json",
        "--executor",
        f"ray:{cluster}",
    )
    assert local[0] == on_ray[0] == 1
    assert local[1] == on_ray[1]  # the same JSON rows, byte for byte (no timings without --timings)
    assert (
        "Connecting to existing Ray cluster" not in on_ray[2] and "Token authentication" not in on_ray[2]
    )  # Ray's log lines kept back
    assert [json.loads(line)["ok"] for line in on_ray[1].splitlines()] == [False, True, False, False]


def test_work_spreads_over_both_nodes(cluster):
    from loadguard.executors import resolve

    from ._ray_tasks import behave

    executor = resolve(f"ray:{cluster}")
    outcomes = executor.map(behave, [f"item {i}" for i in range(6)], timeout=60)
    assert [o.value for o in outcomes] == [f"done: item {i}" for i in range(6)]
    assert len(set(executor.ran_on.values())) == 2


def test_limits_hold_on_ray_workers_and_the_run_goes_on(cluster):
    from loadguard.executors import resolve

    from ._ray_tasks import behave

    start = time.monotonic()
    outcomes = resolve(f"ray:{cluster}").map(behave, ["sleep", "grow", "ok"], timeout=5, memory_limit=300 << 20)
    assert [o.killed for o in outcomes] == ["timeout", "memory", None] and outcomes[2].value == "done: ok"
    assert outcomes[0].error.startswith("timed out after 5 s")
    assert time.monotonic() - start < 60


def test_a_dead_worker_is_retried_once_then_reported(cluster, tmp_path):
    from loadguard.executors import resolve

    from ._ray_tasks import kill_worker_always, kill_worker_once

    executor = resolve(f"ray:{cluster}")
    survived = executor.map(kill_worker_once, [str(tmp_path / "killed-once")], timeout=60)
    assert survived[0].ok and survived[0].value == "survived"
    start = time.monotonic()
    reported = executor.map(kill_worker_always, ["x"], timeout=60)
    assert not reported[0].ok and "its Ray worker died (run 2 times)" in reported[0].error
    assert time.monotonic() - start < 120


def test_resume_on_ray_scans_only_the_rest(cluster, capsys, zoo_folder, tmp_path):
    first, second = str(zoo_folder("clean")), str(zoo_folder("np_buffer"))
    resume = tmp_path / "rows.jsonl"
    code, out, _ = _cli(capsys, "scan", first, "--trust-remote-code", "--format", "json")
    marked = {**json.loads(out), "model_class": "from-the-first-run"}  # a rescan would not keep this
    resume.write_text(json.dumps(marked) + "\n")
    code, out, err = _cli(
        capsys,
        "scan",
        first,
        second,
        "--trust-remote-code",
        "--format",
        "json",
        "--resume",
        str(resume),
        "--executor",
        f"ray:{cluster}",
    )
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["model"] for r in rows] == [first, second] and rows[0]["model_class"] == "from-the-first-run"
    assert rows[1]["ok"] is False and code == 1 and "1 to go" in err
    assert len(resume.read_text().splitlines()) == 2


@pytest.mark.skipif(
    shutil.which("uv", path=str(Path(sys.executable).parent)) is None and shutil.which("uv") is None,
    reason="the matrix needs uv",
)
def test_a_two_version_matrix_on_the_cluster_and_its_diff(cluster, capsys, zoo_folder):
    broken, clean = str(zoo_folder("np_buffer")), str(zoo_folder("clean"))
    code, out, err = _cli(
        capsys,
        "matrix",
        broken,
        clean,
        "--transformers",
        "4.57.6,5.25.0",
        "--trust-remote-code",
        "--executor",
        f"ray:{cluster}",
        "--format",
        "json",
    )
    document = json.loads(out)
    verdicts = {(c["model"], c["transformers"]): c for c in document["cells"]}
    assert (
        verdicts[(broken, "4.57.6")]["status"] == "clean" and verdicts[(broken, "5.25.0")]["status"] == "findings"
    ), err
    assert all(c["ran_with"]["transformers"] == c["transformers"] for c in document["cells"])
    code, out, err = _cli(
        capsys,
        "matrix",
        broken,
        clean,
        "--diff",
        "4.57.6",
        "5.25.0",
        "--trust-remote-code",
        "--executor",
        f"ray:{cluster}",
        "--format",
        "json",
    )
    changes = {c["model"]: c["change"] for c in json.loads(out)["changes"]}
    assert code == 1 and changes == {broken: "new failure", clean: "unchanged"}, out


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_a_native_sweep_on_ray_gives_the_local_rows(cluster, capsys):
    local = _cli(capsys, "scan", "--native", "--match", "Llama*", "--format", "json")
    on_ray = _cli(capsys, "scan", "--native", "--match", "Llama*", "--format", "json", "--executor", f"ray:{cluster}")
    rows = [[_without_timings(json.loads(line)) for line in out.splitlines()] for _, out, _ in (local, on_ray)]
    assert local[0] == on_ray[0] and len(rows[0]) >= 4 and rows[0] == rows[1]
    assert any(row["scanned"] for row in rows[1])


def test_a_bisect_step_and_a_native_matrix_run_as_tasks(cluster, capsys, zoo_folder):
    broken = str(zoo_folder("np_buffer"))
    code, out, err = _cli(
        capsys,
        "matrix",
        broken,
        "--bisect",
        "4.57.6",
        "5.0.0",
        "--trust-remote-code",
        "--executor",
        f"ray:{cluster}",
        "--format",
        "json",
    )
    assert json.loads(out)["bisections"][0]["first_changed"] == "5.0.0", err
    code, out, err = _cli(
        capsys,
        "matrix",
        "--native",
        "--transformers",
        "4.57.6,5.25.0",
        "--match",
        "LlamaForCausalLM",
        "--executor",
        f"ray:{cluster}",
        "--format",
        "json",
    )
    document = json.loads(out)
    assert document["transformers"] == ["4.57.6", "5.25.0"] and not document["errors"], err
