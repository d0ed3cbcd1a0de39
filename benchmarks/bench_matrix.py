"""loadguard matrix: a 3 x 4 matrix (3 zoo models x 4 transformers versions), first with its environments built
(a fresh cache: uv installs transformers and its dependencies; torch is shared), then again from the cache.
Target: the cached matrix costs at most 3 s per cell.

    python benchmarks/bench_matrix.py [--versions 4.57.6,5.0.0,5.12.0,5.24.0] [--jobs 2]

Needs the package index (uv downloads each transformers version once).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", default="4.57.6,5.0.0,5.12.0,5.24.0")
    parser.add_argument("--jobs", type=int, default=2)
    arguments = parser.parse_args()
    from loadguard import zoo

    with tempfile.TemporaryDirectory(prefix="loadguard-bench-matrix-") as workdir:
        models = [
            str(zoo.build(name, Path(workdir) / name))
            for name in ("minicpmv_like", "minicpmv_like_fixed", "overwritten")
        ]
        env = {**os.environ, "LOADGUARD_CACHE": str(Path(workdir) / "cache")}
        command = [
            sys.executable,
            "-m",
            "loadguard",
            "matrix",
            *models,
            "--transformers",
            arguments.versions,
            "--trust-remote-code",
            "--workaround",
            "auto",
            "--workaround",
            "minicpmv-pos-cache",
            "--jobs",
            str(arguments.jobs),
            "--format",
            "markdown",
        ]
        cells = len(models) * len(arguments.versions.split(","))
        for label in ("first run (environments built)", "second run (cached)"):
            start = time.perf_counter()
            result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
            seconds = time.perf_counter() - start
            print(
                f"## {label}: {seconds:.1f} s for {cells} cells = {seconds / cells:.2f} s per cell (exit {result.returncode})"
            )
        print("target: the cached matrix at most 3 s per cell (process start and environment checks included)")
        print(result.stdout.replace(workdir + "/", ""))


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
