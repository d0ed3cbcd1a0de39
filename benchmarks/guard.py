"""The speed guard: this run's figures against the ones stored for the previous release, then stored for this one.

``make bench`` runs every benchmark with ``LOADGUARD_BENCH_RECORD`` naming a file each appends its figures to
(``_machine.record``), then this script, which

- prints every figure more than 10% worse than the one stored in the newest file of ``benchmarks/history/`` (another
  release's), with the machine each was measured on: a ratio is comparable across machines, a time less so, and the
  line says which machine to blame;
- writes this run's figures to ``benchmarks/history/<date>-<commit>.json`` (check it in with the release);
- exits 1 when a figure is worse by more than the margin, 0 otherwise.

    python benchmarks/guard.py RUN.jsonl [--margin 0.10] [--history benchmarks/history] [--no-store]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _commit() -> str:
    """HEAD's short commit, ``-dirty`` when the tree has changes (figures of uncommitted code)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=HERE
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def read_run(path: Path) -> dict[str, dict]:
    """The run's figures by name (a name recorded twice: the last value)."""
    figures: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            figures[row["name"]] = {"value": row["value"], "better": row["better"], "unit": row.get("unit", "")}
    return figures


def previous(history: Path, release: str) -> dict | None:
    """The newest stored file of another release (by its recorded date), or None."""
    stored = []
    for file in history.glob("*.json"):
        data = json.loads(file.read_text(encoding="utf-8"))
        if data.get("release") != release:
            stored.append((data.get("date", ""), file.name, data))
    return max(stored)[2] if stored else None


def worse(now: dict, before: dict, margin: float) -> float | None:
    """How much worse ``now`` is than ``before`` (0.25: 25% worse), or None when it is not worse by more than
    ``margin``."""
    old, new = before["value"], now["value"]
    if old == 0:
        return None
    change = (new - old) / abs(old) if now["better"] == "lower" else (old - new) / abs(old)
    return change if change > margin else None


def compare(figures: dict[str, dict], stored: dict, margin: float) -> list[str]:
    """One line per figure worse than the stored one by more than ``margin``."""
    lines = []
    for name, now in figures.items():
        before = stored["figures"].get(name)
        if before is None or before.get("better") != now["better"]:
            continue
        change = worse(now, before, margin)
        if change is not None:
            unit = f" {now['unit']}" if now["unit"] else ""
            lines.append(f"WORSE by {change:.0%}: {name}: {before['value']:.4g}{unit} -> {now['value']:.4g}{unit}")
    return lines


def main(argv: list[str] | None = None) -> int:
    import _machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the file the benchmarks appended their figures to")
    parser.add_argument(
        "--margin", type=float, default=0.10, help="how much worse a figure may be before it is printed (0.10: 10%%)"
    )
    parser.add_argument("--history", type=Path, default=HERE / "history")
    parser.add_argument("--no-store", action="store_true", help="compare only; write nothing")
    arguments = parser.parse_args(argv)
    if not arguments.run.is_file():
        print(
            f"{arguments.run}: no figures recorded (run the benchmarks with {_machine.RECORD_ENV}={arguments.run})",
            file=sys.stderr,
        )
        return 2
    figures = read_run(arguments.run)
    release, machine = _commit(), _machine.describe()
    stored = previous(arguments.history, release)
    print(f"\n## Speed guard: {len(figures)} figures of this run ({release}; {machine})")
    if stored is None:
        print("nothing stored yet to compare with")
        regressions: list[str] = []
    else:
        print(f"against {stored['release']} of {stored['date']} ({stored['machine']})")
        regressions = compare(figures, stored, arguments.margin)
        compared = sum(1 for name in figures if name in stored["figures"])
        print(
            "\n".join(regressions)
            if regressions
            else f"none of the {compared} figures both runs have is more than {arguments.margin:.0%} worse"
        )
    if not arguments.no_store:
        arguments.history.mkdir(parents=True, exist_ok=True)
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        target = arguments.history / f"{date}-{release}.json"
        payload = {
            "release": release,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine,
            "figures": figures,
        }
        target.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"stored: {target.relative_to(HERE.parent) if target.is_relative_to(HERE.parent) else target}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
