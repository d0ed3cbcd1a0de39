"""The pytest plugin's overhead on a suite that loads many tiny models: examples/peer_suite (8 architectures x the
loading patterns real suites use) run plain (``-p no:loadguard``) and with ``--loadguard=fail``, alternately,
each in a fresh pytest process; prints the median wall time of each and their ratio. Target: at most 1.15x.

    python benchmarks/bench_plugin.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "examples" / "peer_suite"
MODES = {
    "plain": ["-p", "no:loadguard"],
    "fail": ["--loadguard=fail"],
    "fail+poison": ["--loadguard=fail", "--loadguard-poison"],
}


def run(options: list[str], basetemp: str) -> float:
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(SUITE),
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--basetemp",
            basetemp,
            *options,
        ],
        capture_output=True,
        text=True,
        cwd=SUITE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if result.returncode != 0:
        raise SystemExit(f"the peer suite failed with {options}:\n{result.stdout[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-plugin-") as workdir:
        for index in range(arguments.rounds):
            for mode, options in MODES.items():  # interleaved: drift on a busy machine hits every mode alike
                times[mode].append(run(options, f"{workdir}/{mode}-{index}"))
    plain = statistics.median(times["plain"])
    print(f"examples/peer_suite, {arguments.rounds} round(s), median wall time per pytest process:")
    for mode, values in times.items():
        median = statistics.median(values)
        print(
            f"  {mode:<12} {median:6.2f} s  ({median / plain:.2f}x plain)  runs: {', '.join(f'{v:.2f}' for v in values)}"
        )
    ratio = statistics.median(times["fail"]) / plain
    import _machine

    _machine.verdict("--loadguard=fail / plain", ratio, 1.15, name="plugin --loadguard=fail / plain")


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
