"""What a weightless scan of a Hub id fetches, in bytes, over real HTTP: the unmodified huggingface_hub client against
the test suite's Hub endpoint (tests/files/hubserver.py, which counts what it sends), for a small remote-code model and a
Llama-3-70B-shaped sharded checkpoint (30 real-size sparse shards), first scan and second scan of the same revision;
then a fleet of ids (``scan --from``), its bytes per model and wall time.

    python benchmarks/bench_hub.py [--fleet 200] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "files"))


def _scan(hub, home: Path, *args: str) -> tuple[list[dict], float]:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": "0",
        "LOADGUARD_CACHE": str(home / "lg"),
    }
    env.pop("HF_TOKEN", None)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", "scan", *args, "--keys", "header", "--format", "json", "--timings"],
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if not rows or not all(r.get("scanned") for r in rows):
        raise SystemExit(f"scan {args[:2]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return rows, seconds


def main() -> None:
    from hubserver import HubServer, Repo, seventy_b_shaped

    from loadguard import zoo

    parser = argparse.ArgumentParser()
    parser.add_argument("--fleet", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-hub-") as workdir:
        work = Path(workdir)
        small = zoo.build("np_buffer", work / "small")
        weights70 = seventy_b_shaped(work / "llama70b")
        weights_small = (small / "model.safetensors").stat().st_size
        repos = {"bench/small": Repo.from_folder(small), "bench/llama-70b": Repo.from_folder(work / "llama70b")}
        repos.update({f"bench/fleet-{index}": Repo.from_folder(small) for index in range(arguments.fleet)})
        with HubServer(repos) as hub:
            print(f"{'model':<28} {'weights':>12} {'1st scan fetched':>18} {'% of weights':>13} {'2nd scan':>10}")
            for name, weights, extra in (
                ("bench/small", weights_small, ["--trust-remote-code"]),
                ("bench/llama-70b", weights70, []),
            ):
                hub.traffic.reset()
                rows, _ = _scan(hub, work, name, *extra)
                first = hub.traffic.file_bytes()
                hub.traffic.reset()
                _scan(hub, work, name, *extra)
                second = hub.traffic.file_bytes()
                assert rows[0]["fetched_bytes"] == first
                print(
                    f"{name:<28} {weights / 2**20:>10.1f} MB {first / 1024:>15.1f} KB {100 * first / weights:>12.3f}% {second:>8} B"
                )
                import _machine

                _machine.record(f"hub {name} first scan KB", first / 1024, unit="KB")
            listing = work / "fleet.txt"
            listing.write_text("".join(f"bench/fleet-{index}\n" for index in range(arguments.fleet)))
            hub.traffic.reset()
            rows, seconds = _scan(
                hub, work, "--from", str(listing), "--trust-remote-code", "--jobs", str(arguments.jobs)
            )
            fetched = hub.traffic.file_bytes()
            print(
                f"fleet of {len(rows)} ids (--jobs {arguments.jobs}): {seconds:.1f} s, {fetched / len(rows) / 1024:.1f} KB fetched per model, "
                f"{sum(hub.traffic.requests.values()) / len(rows):.1f} requests per model"
            )


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
