"""The machine a benchmark ran on, printed first by every script in benchmarks/: a figure quoted in the docs says
where it was measured."""

from __future__ import annotations

import os
import platform


def describe() -> str:
    """``machine: x86_64, 2 cores, 24 GiB, no GPU; Python 3.11.9, torch 2.13.0+cpu (CPU), transformers 5.25.0``."""
    import torch
    import transformers

    memory = (
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else float("nan")
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "no GPU"
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"
    return (
        f"machine: {platform.machine()}, {cores} cores, {memory:.0f} GiB, {gpu}; Python {platform.python_version()}, "
        f"torch {torch.__version__} ({build}), transformers {transformers.__version__}"
    )


def announce() -> None:
    print(describe(), flush=True)


RECORD_ENV = "LOADGUARD_BENCH_RECORD"


def record(name: str, value: float, *, better: str = "lower", unit: str = "") -> None:
    """Keep one figure of this run for the speed guard (``benchmarks/guard.py``, run last by ``make bench``): a JSON
    line appended to the file ``$LOADGUARD_BENCH_RECORD`` names; nothing when it is unset (a script run by hand).
    ``better``: ``"lower"`` (a time, a ratio to a baseline) or ``"higher"`` (a throughput)."""
    import json

    path = os.environ.get(RECORD_ENV)
    if not path or value != value:  # unset, or NaN: nothing measured
        return
    if better not in ("lower", "higher"):
        raise ValueError(f"better={better!r}: lower or higher")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"name": name, "value": float(value), "better": better, "unit": unit}) + "\n")


def verdict(label: str, ratio: float, target: float, *, name: str, digits: int = 2) -> None:
    """Print a ratio against its target (``label: 1.04x (target <= 1.10x): ok``) and keep it for the speed guard."""
    state = "ok" if ratio <= target else "OVER TARGET"
    print(f"{label}: {ratio:.{digits}f}x (target <= {target:.2f}x): {state}")
    record(name, ratio, unit="x")
