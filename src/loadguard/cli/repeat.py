"""``loadguard repeat -n N -- <pytest args>``: run tests N times, each in a fresh process, and tell a real
flake from a deterministic bug: pass rate, distinct outcomes, a fingerprint per run, where runs differ.

Each run is a new interpreter, so every model load gets fresh memory, as separate CI runs do; repeating
inside one process (pytest-repeat) would hand later loads the memory freed by earlier ones and hide or
fake the variation this command exists to measure. Nor are runs forked from one pre-imported parent, as scan fleets
are: every child inherits the same heap, so ``torch.empty`` hands each the same leftover bytes (measured: four forked
children, one hash of a fresh 4 MB ``torch.empty``; four fresh interpreters, four hashes). ``--jobs J`` runs J of them at once through
pytest-xdist (``-n J --dist each``: J fresh worker processes, each running every selected test once).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import click

from .._infra import procs
from ..errors import LoadguardError
from ._common import ExitCode, emit, progress
from ._consoles import stderr, stdout
from ._options import format_option


def test_name(nodeid: str) -> str:
    """The test's part of a pytest node id, as pytest wrote it: everything after the file (classes, the function and
    its parameters, brackets, dashes, spaces and '::' inside them untouched)."""
    file, separator, rest = nodeid.partition("::")
    return rest if separator else nodeid


def _first_difference(tokens_a: list, tokens_b: list) -> tuple[int, int] | None:
    """(prompt, token position) of the first differing token between two runs' outputs."""
    for prompt, (a, b) in enumerate(zip(tokens_a, tokens_b)):
        for position, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return prompt, position
        if len(a) != len(b):
            return prompt, min(len(a), len(b))
    return None


_XDIST_ARGS = re.compile(r"^(-n\S*|--numprocesses(=.*)?|--dist(=.*)?|-d)$")


def runs_of(record: dict, *, per_process: bool) -> list[dict]:
    """The runs in one pytest invocation's record: one per xdist worker with ``--jobs`` (``--dist each``),
    otherwise one whole run (a pytest ``-n`` of the user's own splits one run across workers)."""
    processes = [record["processes"][key] for key in sorted(record["processes"], key=lambda k: (len(k), k))]
    if per_process:
        return [p for p in processes if p]
    merged: dict = {}
    for process in processes:
        merged.update(process)
    return [merged]


def summarize(runs: list[dict]) -> dict:
    """Per test: pass rate, distinct outcomes, fingerprints per run, first run and token where they differ."""
    tests: dict[str, dict] = {}
    for index, run in enumerate(runs):
        for nodeid, result in run.items():
            tests.setdefault(nodeid, {"runs": {}})["runs"][index] = result
    out = {}
    for nodeid, data in sorted(tests.items()):
        results = [data["runs"].get(i) for i in range(len(runs))]
        present = [r for r in results if r is not None]
        fingerprints = [r["fingerprint"] if r else None for r in results]
        first = present[0]
        first_run = next(
            (i for i, r in enumerate(results) if r is not None and r["fingerprint"] != first["fingerprint"]), None
        )
        token = None
        if first_run is not None:
            where = _first_difference(first["tokens"], results[first_run]["tokens"])
            token = {"prompt": where[0], "position": where[1]} if where else None
        passed = sum(1 for r in present if r["outcome"] == "passed")
        out[nodeid] = {
            "runs": len(present),
            "passed": passed,
            "pass_rate": passed / len(present) if present else 0.0,
            "distinct_outcomes": len({f for f in fingerprints if f is not None}),
            "fingerprints": fingerprints,
            "outcomes": [r["outcome"] if r else None for r in results],
            "first_differing_run": first_run,
            "first_differing_token": token,
            "messages": sorted({r["message"] for r in present if r["message"]}),
            "findings": sorted({f"{f['tensor']} {f['status']}" for r in present for f in r.get("findings", [])}),
        }
    return out


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "-n", "--runs", "count", type=click.IntRange(1, 1000), default=10, show_default=True, help="How many times to run."
)
@click.option("--poison", is_flag=True, help="Run loads under loadguard.poison() (--loadguard-poison).")
@click.option(
    "--loadguard",
    "policy",
    type=click.Choice(["off", "warn", "fail", "repair"]),
    default="off",
    show_default=True,
    help="The plugin's policy in every run.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Runs at once, each a fresh pytest-xdist worker (needs pytest-xdist).",
)
@click.option(
    "--workarounds-from",
    "workaround_files",
    multiple=True,
    metavar="FILE.py",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="A Python file that registers workarounds, imported by every run's pytest (repeatable).",
)
@format_option("json")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def repeat(count, poison, policy, jobs, workaround_files, fmt, pytest_args):
    """Run the selected tests N times in fresh processes; report pass rate and fingerprints per test.

    Exit 0: every test passed in every run; 1: some run failed; 2: could not run.
    """

    if jobs > 1:
        if importlib.util.find_spec("xdist") is None:
            raise LoadguardError(
                "--jobs needs pytest-xdist, which is not installed here",
                "pip install pytest-xdist, or leave out --jobs to run one process at a time",
            )
        if any(_XDIST_ARGS.match(arg) for arg in pytest_args):
            raise LoadguardError(
                "--jobs and a pytest -n/--dist after -- both ask for xdist workers",
                "keep one: loadguard repeat --jobs J, or pytest's own -n after --",
            )
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="loadguard-repeat-") as workdir:
        while len(runs) < count:
            batch = min(jobs, count - len(runs))
            record = os.path.join(workdir, f"run-{len(runs)}.json")
            command = [
                sys.executable,
                "-m",
                "pytest",
                *pytest_args,
                "-q",
                "-p",
                "no:cacheprovider",
                f"--loadguard={policy}",
                f"--loadguard-record={record}",
            ]
            if poison:
                command.append("--loadguard-poison")
            command += [f"--loadguard-workarounds-from={os.path.abspath(file)}" for file in workaround_files]
            if jobs > 1:
                command += ["-n", str(batch), "--dist", "each"]
            label = (
                f"run {len(runs) + 1} of {count}"
                if batch == 1
                else f"runs {len(runs) + 1}-{len(runs) + batch} of {count}"
            )
            with progress(label, after=0.0 if fmt == "table" and stderr().is_terminal else 1e9):
                completed = subprocess.run(command, capture_output=True, text=True, **procs.subprocess_options())
            new = []
            if os.path.exists(record):
                with open(record) as handle:
                    new = runs_of(json.load(handle), per_process=jobs > 1)
            if len(new) != batch:
                tail = (completed.stdout + completed.stderr).strip().splitlines()[-3:]
                raise LoadguardError(
                    f"pytest did not run (exit {completed.returncode}, {len(new)} of {batch} run(s) recorded): {' | '.join(tail)}",
                    "check the pytest arguments after --, and that the loadguard plugin is installed in this environment",
                )
            runs.extend(new)
    tests = summarize(runs)
    if not tests:
        raise LoadguardError("the pytest arguments selected no tests", "pass test paths or -k expressions after --")
    flawless = all(t["passed"] == t["runs"] for t in tests.values())
    if fmt == "json":
        emit(
            json.dumps(
                {"runs": count, "jobs": jobs, "poison": poison, "policy": policy, "ok": flawless, "tests": tests},
                indent=2,
            )
        )
    else:
        from rich.table import Table

        table = Table(header_style="bold")
        table.add_column("test", overflow="fold", ratio=3)
        for column in ("pass rate", "distinct outcomes", "first differing run", "first differing token"):
            table.add_column(column, overflow="fold", ratio=1)
        table.add_column("fingerprints", overflow="fold", ratio=3)
        for nodeid, t in tests.items():
            token = t["first_differing_token"]
            table.add_row(
                test_name(nodeid),
                f"{t['passed']}/{t['runs']}",
                str(t["distinct_outcomes"]),
                "-" if t["first_differing_run"] is None else str(t["first_differing_run"]),
                "-" if token is None else f"prompt {token['prompt']}, token {token['position']}",
                " ".join((f or "-")[:8] for f in t["fingerprints"][:8])
                + (" ..." if len(t["fingerprints"]) > 8 else ""),
            )
        out = stdout()
        out.print(table)
        for nodeid, t in tests.items():
            for finding in t["findings"]:
                out.print(f"{test_name(nodeid)}: loadguard found {finding}", highlight=False)
        verdict = (
            "stable: every run passed"
            if flawless
            else (
                "flaky: outcomes differ between runs"
                if any(t["distinct_outcomes"] > 1 for t in tests.values())
                else "failing the same way every run"
            )
        )
        out.print(verdict, highlight=False)
    return ExitCode.CLEAN if flawless else ExitCode.FINDINGS
