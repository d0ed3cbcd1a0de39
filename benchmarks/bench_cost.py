"""The cost of looking: the previous release's code against today's, side by side in one run, same venv, same machine,
rounds alternating (previous, now, previous, now...), best round of each side.

- ``scan --native --match '*ForCausalLM' --jobs 2`` (every causal-LM class of the installed transformers);
- a fleet of the 24 zoo models the previous release knew (``scan --from``, ``--jobs 2``), built once by today's zoo;
- a 70B-shaped Llama config scanned in a warm process: best of 3, and the first scan after a tiny warm-up scan.

Target: now <= 0.9x the previous release for both fleets, the 70B warm scan <= 0.5 s and the first <= 0.7 s, with
every field the release added still there (each failing finding names its line of code) and the same verdicts.
The previous release's code is taken from git (``git archive REV src``) and run from a temporary folder ahead of
the installed one on ``PYTHONPATH``.

    python benchmarks/bench_cost.py [--against 48818b6] [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PREVIOUS_RELEASE = "48818b6"  # the release issue 38 measured the slowdown against

# the zoo as the previous release knew it: a fleet both releases can scan
ZOO_FLEET = (
    "minicpmv_like minicpmv_like_fixed np_buffer np_buffer_in_checkpoint shared_buffer missing_key overwritten sharded tensor_attribute "
    "typing_alias v4_tied_weights v4_attn_mask v4_torch_fx v4_rope_scaling v4_llama_flash v4_max_length v4_pad_token v4_tie_signature "
    "v4_model_attrs v4_module_names device_picking int8_buffers v4_tied_list clean"
).split()


def previous_source(revision: str, into: Path) -> Path:
    """The ``src`` folder of ``revision``, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision, "src"], capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryFile() as buffer:
        buffer.write(archive)
        buffer.seek(0)
        with tarfile.open(fileobj=buffer) as tar:
            tar.extractall(into, filter="data")
    return into / "src"


def run(source: Path, arguments: list[str]) -> tuple[float, list[dict]]:
    """``python -m loadguard ARGUMENTS`` with ``source`` first on the path: wall seconds and the JSON rows."""
    env = {**os.environ, "PYTHONPATH": str(source), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "loadguard", *arguments],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    seconds = time.perf_counter() - start
    if result.returncode not in (0, 1):
        raise SystemExit(
            f"{source}: loadguard {' '.join(arguments)} exited {result.returncode}: {result.stderr.strip()[-500:]}"
        )
    return seconds, [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def verdicts(rows: list[dict]) -> dict[str, list[tuple[str, str]]]:
    return {row["model"]: sorted((f["tensor"], f["status"]) for f in row.get("findings", [])) for row in rows}


def side_by_side(label: str, sources: dict[str, Path], arguments: list[str], rounds: int) -> dict[str, list[dict]]:
    """Each side ``rounds`` times, alternating; prints best and ratio; returns the last rows of each side."""
    times: dict[str, list[float]] = {side: [] for side in sources}
    rows: dict[str, list[dict]] = {}
    for _ in range(rounds):
        for side, source in sources.items():
            seconds, rows[side] = run(source, arguments)
            times[side].append(seconds)
    best = {side: min(values) for side, values in times.items()}
    ratio = best["now"] / best["previous"]
    same = verdicts(rows["now"]) == verdicts(rows["previous"])
    print(
        f"{label:<44} previous {best['previous']:6.1f} s   now {best['now']:6.1f} s   now/previous {ratio:5.2f}x "
        f"(target <= 0.90x: {'ok' if ratio <= 0.9 else 'OVER'})   same verdicts: {same}   rounds: "
        + "; ".join(f"{side} " + ", ".join(f"{v:.1f}" for v in values) for side, values in times.items())
    )
    import _machine

    _machine.record(f"{label}: now/previous", ratio, unit="x")
    return rows


def located(rows: list[dict]) -> str:
    failing = [
        f
        for row in rows
        for f in row.get("findings", [])
        if f["status"] in ("uninitialized", "on_meta", "overwritten", "mismatch")
    ]
    with_line = sum(1 for f in failing if f.get("location"))
    return f"{with_line} of {len(failing)} failing findings name their line of code"


def warm_70b(sources: dict[str, Path], rounds: int) -> None:
    print(
        "\n## 70B-shaped Llama config in a warm process (fresh interpreter per round; best of 3 warm scans, the first after a tiny warm-up)"
    )
    from bench_scan import warm_70b_times

    results: dict[str, list[tuple[float, float]]] = {side: [] for side in sources}
    for _ in range(rounds):
        for side, source in sources.items():
            results[side].append(warm_70b_times(str(source)))
    for side, values in results.items():
        first, warm = min(v[0] for v in values), min(v[1] for v in values)
        print(
            f"{side:<10} warm best of 3: {warm:.2f} s (target <= 0.5 s)   first after warm-up: {first:.2f} s (target <= 0.7 s)"
        )


def main() -> None:
    import _machine

    _machine.announce()
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default=PREVIOUS_RELEASE, help="the previous release's commit")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="the zoo fleet and the 70B scan only (no native sweep)")
    options = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from loadguard import zoo

    with tempfile.TemporaryDirectory(prefix="loadguard-bench-cost-") as workdir:
        work = Path(workdir)
        sources = {"previous": previous_source(options.against, work / "previous"), "now": REPO / "src"}
        print(
            f"previous: {options.against} (git archive); now: {REPO / 'src'}; {options.rounds} rounds, alternating, best of each side"
        )
        if not options.quick:
            rows = side_by_side(
                "scan --native '*ForCausalLM' --jobs 2",
                sources,
                ["scan", "--native", "--match", "*ForCausalLM", "--jobs", "2", "--format", "json"],
                options.rounds,
            )
            print(f"{'':<44} now: {len(rows['now'])} classes; {located(rows['now'])}")
        listing = work / "fleet.txt"
        listing.write_text("\n".join(str(zoo.build(name, work / "zoo" / name)) for name in ZOO_FLEET) + "\n")
        fleet_arguments = [
            "scan",
            "--from",
            str(listing),
            "--trust-remote-code",
            "--workaround",
            "auto",
            "--jobs",
            "2",
            "--format",
            "json",
        ]
        rows = side_by_side(
            f"zoo fleet of {len(ZOO_FLEET)} (scan --from, --jobs 2)", sources, fleet_arguments, options.rounds
        )
        print(f"{'':<44} now: {located(rows['now'])}")
        warm_70b(sources, options.rounds)


if __name__ == "__main__":
    main()
