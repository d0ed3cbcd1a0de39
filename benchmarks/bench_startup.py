"""How fast the CLI answers what needs no model: ``loadguard --help``, a subcommand's help, a usage error, a path that
does not exist, an offline Hub id with nothing cached, against ``hf --help`` (huggingface_hub's CLI) on the same machine,
each in a fresh process, rounds alternating; and what ``import loadguard`` and the pytest plugin (loaded by every pytest
run in the environment) cost. Target: each command <= 0.3 s.

``--before SRC``: the same commands also run with ``PYTHONPATH=SRC`` (the ``src`` folder of another checkout, e.g. a
``git worktree`` of the previous commit), alternating with this one, and each line says after / before.

    python benchmarks/bench_startup.py [--rounds 5] [--before ../old/src]
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


IMPORTS = {
    "import loadguard": "import loadguard",
    "import loadguard.pytest_plugin": "import loadguard.pytest_plugin",
}


def _time(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None, help="the src folder of the checkout to compare with")
    arguments = parser.parse_args()
    hf = shutil.which("hf", path=str(Path(sys.executable).parent)) or shutil.which("hf")
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-startup-") as home:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": home}
        commands = {name: [sys.executable, "-m", "loadguard", *args] for name, args in CASES.items()}
        commands.update({name: [sys.executable, "-c", code] for name, code in IMPORTS.items()})
        if hf:
            commands["hf --help (reference)"] = [hf, "--help"]
        times: dict[str, list[float]] = {name: [] for name in commands}
        before: dict[str, list[float]] = {name: [] for name in commands}
        older = {**env, "PYTHONPATH": str(arguments.before.resolve())} if arguments.before else None
        for _ in range(arguments.rounds):
            for name, command in commands.items():
                times[name].append(_time(command, env))
                if older and not name.startswith("hf "):
                    before[name].append(_time(command, older))
    reference = statistics.median(times["hf --help (reference)"]) if hf else None
    print(f"median of {arguments.rounds} fresh processes per command (target <= 0.3 s)")
    for name, values in times.items():
        median = statistics.median(values)
        ratio = f"{median / reference:5.2f}x hf --help" if reference else ""
        if before[name]:
            then = statistics.median(before[name])
            ratio += f"  before {then:6.3f} s, after/before {median / then:5.2f}"
        print(f"{name:<40} {median:6.3f} s  {ratio}")
        if reference and not name.startswith("hf "):
            import _machine

            _machine.record(f"startup {name} / hf --help", median / reference, unit="x")


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
