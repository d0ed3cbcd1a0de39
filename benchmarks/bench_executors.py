"""Fleets and matrices on the local and the Ray executor, side by side in one run: a fleet of zoo models scanned with
``--executor local --jobs 2`` and on a 2-node Ray cluster started here (two ``ray start`` nodes of one CPU each: the
same 2 cores), each as a fresh ``loadguard`` process; then a 2-version matrix on both. Prints wall times, the marginal
cost per model and per cell (a run of N minus a run of 1, over N-1), the ratio Ray/local, whether the rows were equal,
and the environment build cost (into an empty cache) that a projection to more nodes needs.

    python benchmarks/bench_executors.py [--models 24] [--cells-models 12] [--versions 4.57.6,5.25.0]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(arguments: list[str], workdir: str, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", *arguments], capture_output=True, text=True, cwd=workdir, env=env
    )
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"loadguard {' '.join(arguments)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - start, done.stdout


def _start_cluster(temp: str, env: dict) -> tuple[str, list[int], float]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray = str(Path(sys.executable).parent / "ray")
    sessions, start = [], time.perf_counter()
    for command in (
        [
            ray,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        [ray, "start", f"--address=127.0.0.1:{port}", "--num-cpus=1", "--disable-usage-stats"],
    ):
        started = subprocess.Popen(
            command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        sessions.append(started.pid)
        if started.wait(timeout=120) != 0:
            raise SystemExit(f"{' '.join(command)} failed")
    return f"127.0.0.1:{port}", sessions, time.perf_counter() - start


def _stop_cluster(sessions: list[int]) -> None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) in sessions:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def _rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def main() -> None:
    from loadguard import zoo

    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=24)
    parser.add_argument("--cells-models", type=int, default=12)
    parser.add_argument("--versions", default="4.57.6,5.25.0")
    arguments = parser.parse_args()
    names = [entry.name for entry in zoo.entries()]
    # a cluster of its own, without the token a local ray.init() elsewhere may have left in ~/.ray
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="lgbench") as workdir:
        folders = [str(zoo.build(names[i % len(names)], Path(workdir, f"m{i:03d}"))) for i in range(arguments.models)]
        every, one = Path(workdir, "models.txt"), Path(workdir, "one.txt")
        every.write_text("".join(f"{f}\n" for f in folders))
        one.write_text(f"{folders[0]}\n")
        scan = ["scan", "--trust-remote-code", "--workaround", "auto", "--format", "json", "--timeout", "600"]
        address, sessions, cluster_seconds = _start_cluster(tempfile.mkdtemp(prefix="lgb", dir="/tmp"), env)
        try:
            results = {}
            for label, extra in (("local", ["--jobs", "2"]), ("ray", ["--executor", f"ray:{address}"])):
                wall_one, _ = _run([*scan, "--from", str(one), *extra], workdir, env)
                wall_all, out = _run([*scan, "--from", str(every), *extra], workdir, env)
                results[label] = (wall_one, wall_all, _rows(out))
            print(
                f"fleet: scan --from a list of {len(folders)} zoo models (a fresh process each run); Ray: 2 nodes x 1 CPU started in {cluster_seconds:.1f} s"
            )
            print(f"{'executor':<9} {'1 model s':>10} {'N models s':>11} {'per model s':>12} {'vs local':>9}")
            base = None
            for label, (wall_one, wall_all, _) in results.items():
                marginal = (wall_all - wall_one) / max(1, len(folders) - 1)
                base = base or marginal
                print(f"{label:<9} {wall_one:>10.2f} {wall_all:>11.2f} {marginal:>12.3f} {marginal / base:>8.2f}x")
            rows = results["local"][2]
            print(
                f"rows equal: {bool(rows) and rows == results['ray'][2]} ({len(rows)} rows)"
            )  # two empty outputs are not equal rows

            versions = arguments.versions.split(",")
            cells_models = folders[: arguments.cells_models]
            matrix = [
                "matrix",
                *cells_models,
                "--transformers",
                ",".join(versions),
                "--trust-remote-code",
                "--format",
                "json",
            ]
            cold_cache = Path(workdir, "cache")
            wall_cold, out = _run([*matrix, "--jobs", "2"], workdir, {**env, "LOADGUARD_CACHE": str(cold_cache)})
            built = json.loads(out)["seconds"]["environments"]
            print(f"\nmatrix: {len(cells_models)} models x {len(versions)} versions ({', '.join(versions)})")
            print(
                f"environments built into an empty cache: {built:.1f} s of build time over {len(versions)} versions (whole cold run {wall_cold:.1f} s)"
            )
            print(f"{'executor':<9} {'1 model s':>10} {'N models s':>11} {'per cell s':>11} {'vs local':>9}")
            base = None
            outputs = {}
            one_model = ["matrix", cells_models[0], *matrix[1 + len(cells_models) :]]
            for label, extra in (("local", ["--jobs", "2"]), ("ray", ["--executor", f"ray:{address}"])):
                wall_one, _ = _run([*one_model, *extra], workdir, {**env, "LOADGUARD_CACHE": str(cold_cache)})
                wall, out = _run([*matrix, *extra], workdir, {**env, "LOADGUARD_CACHE": str(cold_cache)})
                per_cell = (wall - wall_one) / (
                    (len(cells_models) - 1) * len(versions)
                )  # the marginal cell, fixed costs aside
                base = base or per_cell
                outputs[label] = [(c["model"], c["transformers"], c["verdict"]) for c in json.loads(out)["cells"]]
                print(f"{label:<9} {wall_one:>10.2f} {wall:>11.2f} {per_cell:>11.3f} {per_cell / base:>8.2f}x")
            print(
                f"cells equal: {bool(outputs['local']) and outputs['local'] == outputs['ray']} ({len(outputs['local'])} cells)"
            )
        finally:
            _stop_cluster(sessions)


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
