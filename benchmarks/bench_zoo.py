"""What building each zoo entry costs: seconds and megabytes, against the budget (< 2 s, a few MB each).

    python benchmarks/bench_zoo.py            # every entry, 3 builds each, in one process

The first build in a process pays for the imports (torch, transformers, tokenizers); it is printed on its
own line so the per-entry numbers show the steady cost a test or the demo pays.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 2.0
BUDGET_MB = 5.0


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="builds per entry (median is printed)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    from loadguard import zoo

    names = [entry.name for entry in zoo.entries()]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        zoo.build(names[0], root / "warmup")
        print(f"first build in a fresh process (imports included): {time.perf_counter() - start:.2f} s")
        print(f"{'entry':<26}{'median s':>10}{'max s':>8}{'MB':>7}{'s / budget':>12}")
        worst = 0.0
        for name in names:
            times = []
            for i in range(args.repeat):
                t0 = time.perf_counter()
                folder = zoo.build(name, root / f"{name}-{i}")
                times.append(time.perf_counter() - t0)
            size = folder_mb(folder)
            worst = max(worst, max(times))
            flag = "" if max(times) < BUDGET_S and size < BUDGET_MB else "  OVER BUDGET"
            print(
                f"{name:<26}{statistics.median(times):>10.3f}{max(times):>8.3f}{size:>7.2f}{max(times) / BUDGET_S:>12.3f}{flag}"
            )
    print(f"slowest build: {worst:.3f} s = {worst / BUDGET_S:.3f} of the {BUDGET_S:.0f} s budget")
    import _machine

    _machine.record("zoo slowest build s", worst, unit="s")
    return 0


if __name__ == "__main__":
    import _machine

    _machine.announce()
    sys.exit(main())
