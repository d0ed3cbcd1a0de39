"""A fleet of paths that do not exist: ``loadguard scan --from LIST --format json`` over 5,000 of them, a fresh process,
against the same command over one. A row that needs no model code is answered in the parent with one ``stat`` (it was
a fork per row: ~85 ms each, ~7 minutes for 5,000); the figure printed is what the extra 4,999 rows cost.

    python benchmarks/bench_missing.py [--paths 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(listing: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "loadguard", "scan", "--from", str(listing), "--format", "json"],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if result.returncode != 2:
        raise SystemExit(f"expected exit 2 (none could be scanned), got {result.returncode}:\n{result.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--paths", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-missing-") as workdir:
        many, one = Path(workdir, "many.txt"), Path(workdir, "one.txt")
        many.write_text("".join(f"{workdir}/missing/model-{index}\n" for index in range(arguments.paths)))
        one.write_text(f"{workdir}/missing/model-0\n")
        times = {"one": [], "many": []}
        for _ in range(arguments.rounds):  # alternating
            times["one"].append(_run(one))
            times["many"].append(_run(many))
    first, all_ = statistics.median(times["one"]), statistics.median(times["many"])
    print(f"scan --from a list of paths that do not exist, median of {arguments.rounds} fresh processes")
    print(
        f"1 path: {first:.2f} s; {arguments.paths} paths: {all_:.2f} s; the extra {arguments.paths - 1} rows: {all_ - first:.2f} s "
        f"({(all_ - first) / (arguments.paths - 1) * 1000:.2f} ms a row; target: {arguments.paths} rows in <= 5 s)"
    )
    import _machine

    _machine.record("missing path ms a row", (all_ - first) / (arguments.paths - 1) * 1000, unit="ms")


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
