"""What ``loadguard fix`` costs, measured side by side with what it is made of. Prints ratios.

    python benchmarks/bench_fix.py            # np_buffer, overwritten and the MiniCPM-V-shaped zoo model
    python benchmarks/bench_fix.py --quick    # np_buffer only

The target (issue 34): a fix of a model costs at most 2x its audit plus one run in the transformers 4.57 environment.
Without weights (issue 44: the same folder, its checkpoint removed): a weightless fix costs at most 1.5x a weightless
scan plus one weightless run in the 4.57 environment.
Proof (c) (issue 46: the patched copy's outputs on 5.x against the original's on 4.x) adds at most one forward pass and
8 greedy tokens per side: ``loadguard.fix`` with it and without it (``prove_outputs=False``), side by side.
Each is measured as a user runs it, in a fresh process, one after the other in this run: ``loadguard audit``,
``python -m loadguard._fix.prove`` (the 4.57 run: two loads and a comparison) and ``loadguard fix``. The 4.57
environment is built (or found) once before any timing.
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

from loadguard import zoo
from loadguard._infra import envs

BIN = Path(sys.executable).parent


def run(command: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if result.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}: {result.stderr[-400:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    entries = ["np_buffer"] if options.quick else ["np_buffer", "overwritten", "minicpmv_like"]
    start = time.perf_counter()
    environment = envs.environment("4.57.6")
    print(
        f"4.57.6 environment: {'built' if environment.created else 'found'} in {time.perf_counter() - start:.1f} s ({environment.reason or 'ok'})"
    )
    if not environment.ok:
        raise SystemExit("the 4.57.6 environment is needed: run with the package index reachable")
    compat_env = {**os.environ, "HF_MODULES_CACHE": str(environment.folder / "hf_modules"), "HF_HUB_OFFLINE": "1"}
    print(f"{'model':16} {'audit s':>8} {'4.57 run s':>10} {'fix s':>7} {'fix / (2 audit + 4.57 run)':>28}")
    with tempfile.TemporaryDirectory() as scratch:
        for name in entries:
            folder = zoo.build(name, Path(scratch) / name)
            workarounds = ["--workaround", "auto"]
            audits, compats, fixes = [], [], []
            for attempt in range(options.repeat):
                audits.append(run([str(BIN / "loadguard"), "audit", str(folder), "--trust-remote-code", *workarounds]))
                compats.append(
                    run(
                        [
                            str(environment.python),
                            "-m",
                            "loadguard._fix.prove",
                            str(folder),
                            str(folder),
                            ",".join(zoo.get(name).needed_workarounds),
                        ],
                        compat_env,
                    )
                )
                fixes.append(
                    run(
                        [
                            str(BIN / "loadguard"),
                            "fix",
                            str(folder),
                            "--out",
                            str(Path(scratch) / f"{name}-fixed-{attempt}"),
                            "--trust-remote-code",
                        ]
                    )
                )
            audit, compat, fix = (statistics.median(v) for v in (audits, compats, fixes))
            print(f"{name:16} {audit:8.2f} {compat:10.2f} {fix:7.2f} {fix / (2 * audit + compat):28.2f}")
            import _machine

            _machine.record(f"fix {name} / (2 audit + 4.57 run)", fix / (2 * audit + compat), unit="x")
            weightless(name, folder, Path(scratch), environment, compat_env, options.repeat)
            outputs_proof(name, folder, Path(scratch), options.repeat)
    print("(medians of", options.repeat, "runs each, alternating; a ratio <= 1.00 meets the target)")


def weightless(name: str, folder: Path, scratch: Path, environment, compat_env: dict, repeat: int) -> None:
    """The same model with no checkpoint: ``loadguard scan``, the weightless 4.57 run, and the weightless ``fix``."""
    import shutil

    bare = scratch / f"{name}-bare"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
    scans, compats, fixes = [], [], []
    for attempt in range(repeat):
        scans.append(run([str(BIN / "loadguard"), "scan", str(bare), "--trust-remote-code", "--workaround", "auto"]))
        prove = [str(environment.python), "-m", "loadguard._fix.prove", str(bare), str(bare)]
        compats.append(run(prove + [",".join(zoo.get(name).needed_workarounds), "", "weightless"], compat_env))
        out = str(scratch / f"{name}-bare-fixed-{attempt}")
        fixes.append(run([str(BIN / "loadguard"), "fix", str(bare), "--out", out, "--trust-remote-code"]))
    scan, compat, fix = (statistics.median(v) for v in (scans, compats, fixes))
    ratio = fix / (1.5 * scan + compat)
    print(
        f"{name + ' (no weights)':16} scan {scan:.2f} s, 4.57 run {compat:.2f} s, fix {fix:.2f} s: "
        f"fix / (1.5 scan + 4.57 run) = {ratio:.2f}"
    )
    import _machine

    _machine.record(f"weightless fix {name} / (1.5 scan + 4.57 run)", ratio, unit="x")


def outputs_proof(name: str, folder: Path, scratch: Path, repeat: int) -> None:
    """``loadguard.fix`` with proof (c) and without it, alternating, each in a fresh process."""
    timed = {True: [], False: []}
    for attempt in range(repeat):
        for proven in (True, False):
            out = scratch / f"{name}-c{int(proven)}-{attempt}"
            code = f"import loadguard; loadguard.fix({str(folder)!r}, {str(out)!r}, trust_remote_code=True, prove_outputs={proven})"
            timed[proven].append(run([sys.executable, "-c", code]))
    with_c, without = statistics.median(timed[True]), statistics.median(timed[False])
    print(
        f"{name + ' (c)':16} fix with (c) {with_c:.2f} s, without {without:.2f} s: with / without = {with_c / without:.2f}"
    )
    import _machine

    _machine.record(f"fix {name} with (c) / without", with_c / without, unit="x")


if __name__ == "__main__":
    main()
