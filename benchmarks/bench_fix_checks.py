"""What the checks a fix runs before it calls a patch fixed cost (issue 57): the three that need no model run (the diff
applies with git and patch, the files compile on every supported Python, pyflakes finds nothing new) and the save round
trip (save_pretrained, from_pretrained of what it wrote, every tensor compared), against the whole ``loadguard fix``,
each model fixed in a fresh process as a user runs it; prints each share. Target: seconds, not a load (at most 15% of
the fix).

    python benchmarks/bench_fix_checks.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadguard import zoo

BIN = Path(sys.executable).parent


def one(folder: Path, out: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run(
        [str(BIN / "loadguard"), "fix", str(folder), "--out", str(out), "--trust-remote-code", "--format", "json"],
        capture_output=True,
        text=True,
    )
    total = time.perf_counter() - start
    document = json.loads(done.stdout)
    seconds = document["seconds"]
    return {"total": total, "checks": seconds.get("checks", 0.0), "saves": seconds.get("saves", 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-checks-") as workdir:
        root = Path(workdir)
        models = {name: zoo.build(name, root / name) for name in ("np_buffer", "minicpmv_like")}
        one(models["np_buffer"], root / "warm")  # the 4.57 environment built (or found) before any timing
        ratios = []
        for name, folder in models.items():
            runs = [one(folder, root / f"{name}-fixed-{i}") for i in range(arguments.rounds)]
            total = statistics.median(r["total"] for r in runs)
            checks = statistics.median(r["checks"] for r in runs)
            saves = statistics.median(r["saves"] for r in runs)
            ratios.append((checks + saves) / total)
            print(
                f"{name:<14} fix {total:6.2f} s; static checks {checks:5.2f} s, save round trip {saves:5.2f} s: "
                f"{(checks + saves) / total:.1%} of the fix"
            )
    worst = max(ratios)
    print(f"the new checks' largest share: {worst:.1%} (target <= 15%): {'ok' if worst <= 0.15 else 'OVER TARGET'}")
    import _machine

    _machine.record("fix checks share", worst, unit="x")


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
