"""benchmarks/guard.py, the speed guard ``make bench`` ends with: a figure more than 10% worse than the previous
release's is printed with both machines, the run is stored for this release, and the exit code says so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def guard(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("guard", None)
    import guard

    return guard


def _run(tmp_path: Path, figures: dict[str, tuple[float, str]]) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text(
        "".join(
            json.dumps({"name": name, "value": value, "better": better, "unit": "x"}) + "\n"
            for name, (value, better) in figures.items()
        )
    )
    return path


def test_a_figure_more_than_ten_percent_worse_is_printed_and_fails_the_guard(guard, tmp_path, capsys, monkeypatch):
    history = tmp_path / "history"
    history.mkdir()
    stored = {
        "release": "abc1234",
        "date": "2026-12-01T00:00:00+00:00",
        "machine": "machine: the old one",
        "figures": {
            "scan/audit": {"value": 0.40, "better": "lower", "unit": "x"},
            "fleet s": {"value": 10.0, "better": "lower", "unit": "s"},
            "throughput": {"value": 1.0, "better": "higher", "unit": "x"},
            "gone": {"value": 1.0, "better": "lower", "unit": "x"},
        },
    }
    (history / "2026-12-01-abc1234.json").write_text(json.dumps(stored))
    monkeypatch.setattr(guard, "_commit", lambda: "def5678")
    run = _run(
        tmp_path,
        {
            "scan/audit": (0.45, "lower"),
            "fleet s": (10.9, "lower"),
            "throughput": (0.85, "higher"),
            "new": (1.0, "lower"),
        },
    )
    assert guard.main([str(run), "--history", str(history)]) == 1
    out = capsys.readouterr().out
    assert "against abc1234 of 2026-12-01T00:00:00+00:00 (machine: the old one)" in out and "def5678" in out
    assert "WORSE by 12%: scan/audit: 0.4 x -> 0.45 x" in out and "WORSE by 15%: throughput" in out
    assert "fleet s" not in out.split("against")[1].split("stored")[0]  # 9% worse: within the margin
    written = json.loads(next(history.glob("*-def5678.json")).read_text())
    assert (
        written["release"] == "def5678"
        and written["figures"]["new"]["value"] == 1.0
        and "machine:" in written["machine"]
    )


def test_nothing_worse_passes_and_the_newest_other_release_is_the_baseline(guard, tmp_path, capsys, monkeypatch):
    history = tmp_path / "history"
    history.mkdir()
    for release, date, value in (
        ("old0001", "2026-11-01", 0.2),
        ("new0002", "2026-12-01", 0.5),
        ("def5678", "2026-12-03", 0.1),
    ):
        (history / f"{date}-{release}.json").write_text(
            json.dumps(
                {
                    "release": release,
                    "date": date,
                    "machine": "m",
                    "figures": {"r": {"value": value, "better": "lower", "unit": ""}},
                }
            )
        )
    monkeypatch.setattr(guard, "_commit", lambda: "def5678")  # this release's own earlier file is not its baseline
    assert guard.main([str(_run(tmp_path, {"r": (0.52, "lower")})), "--history", str(history), "--no-store"]) == 0
    out = capsys.readouterr().out
    assert "against new0002" in out and "none of the 1 figures both runs have is more than 10% worse" in out
    assert guard.main([str(tmp_path / "absent.jsonl"), "--history", str(history)]) == 2
