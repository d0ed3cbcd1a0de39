"""How fast the CLI answers what needs no model: ``loadguard --help``, a subcommand's help, a usage error, a path that
does not exist, an offline Hub id with nothing cached, against ``hf --help`` (huggingface_hub's CLI) on the same machine,
each in a fresh process, rounds alternating. Target: each <= 0.3 s.

    python benchmarks/bench_startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "loadguard --help": ["--help"],
    "loadguard audit --help": ["audit", "--help"],
    "loadguard env --help": ["env", "--help"],
    "loadguard audit --bogus": ["audit", "--bogus"],
    "loadguard scna (did you mean)": ["scna"],
    "loadguard audit /nonexistent": ["audit", "/nonexistent/model"],
    "loadguard scan /nonexistent": ["scan", "/nonexistent/model"],
    "loadguard audit org/name (offline)": ["audit", "org/not-cached"],
}


def _time(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or shutil.which("hf")
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-startup-") as home:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": home}
        commands = {name: [sys.executable, "-m", "loadguard", *args] for name, args in CASES.items()}
        if hf:
            commands["hf --help (reference)"] = [hf, "--help"]
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(arguments.rounds):
            for name, command in commands.items():
                times[name].append(_time(command, env))
    reference = statistics.median(times["hf --help (reference)"]) if hf else None
    print(f"median of {arguments.rounds} fresh processes per command (target <= 0.3 s)")
    for name, values in times.items():
        median = statistics.median(values)
        ratio = f"{median / reference:5.2f}x hf --help" if reference else ""
        print(f"{name:<40} {median:6.3f} s  {ratio}")
        if reference and not name.startswith("hf "):
            import _machine

            _machine.record(f"startup {name} / hf --help", median / reference, unit="x")


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
