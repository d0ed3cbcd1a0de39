"""What each output format costs on a 24-model fleet: ``loadguard scan --from LIST --format F`` for every format, in
rounds that alternate the formats, each in a fresh process; prints the median wall time, its ratio to ``json`` and the
size of the output. The scans dominate; a format adds what rendering its document costs.

    python benchmarks/bench_formats.py [--rounds 3] [--models 24]
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

FORMATS = ("table", "json", "markdown", "sarif", "github", "junit")


def main() -> None:
    from loadguard import zoo

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", type=int, default=24)
    arguments = parser.parse_args()
    names = [entry.name for entry in zoo.entries()][: arguments.models]
    times: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-formats-") as workdir:
        listing = Path(workdir, "models.txt")
        listing.write_text("".join(f"{zoo.build(name, Path(workdir, name))}\n" for name in names))
        summary = Path(workdir, "summary.md")
        for _ in range(arguments.rounds):
            for fmt in FORMATS:
                start = time.perf_counter()
                result = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "loadguard",
                        "scan",
                        "--from",
                        str(listing),
                        "--trust-remote-code",
                        "--workaround",
                        "auto",
                        "--jobs",
                        "2",
                        "--format",
                        fmt,
                    ],
                    capture_output=True,
                    text=True,
                    cwd=workdir,
                    env={**os.environ, "HF_HUB_OFFLINE": "1", "GITHUB_STEP_SUMMARY": str(summary)},
                )
                times[fmt].append(time.perf_counter() - start)
                if result.returncode not in (0, 1, 3):
                    raise SystemExit(f"--format {fmt} failed ({result.returncode}):\n{result.stderr[-2000:]}")
                sizes[fmt] = len(result.stdout.encode())
    base = statistics.median(times["json"])
    print(
        f"scan --from a list of {len(names)} zoo models, --jobs 2, median of {arguments.rounds} fresh processes per format"
    )
    print(f"{'format':<10} {'wall s':>8} {'vs json':>8} {'output':>10}")
    for fmt in FORMATS:
        median = statistics.median(times[fmt])
        print(f"{fmt:<10} {median:>8.2f} {median / base:>7.2f}x {sizes[fmt] / 1024:>8.1f} KB")
        if fmt != "json":
            import _machine

            _machine.record(f"format {fmt} / json", median / base, unit="x")


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
