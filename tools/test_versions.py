"""Every released transformers version in reach: `make test-versions` (slow, not in CI).

For 4.57.6, 5.0.0, the last patch of every 5.x minor and the newest release the package index offers, each in the
matrix's cached environment (created on first use):

1. the scan's self-check there (the scan-equals-audit differential on the self-check's zoo models and a native Llama);
2. every zoo entry scanned (no weights) and audited after a full load (``--full``): the two verdicts must agree,
   tensor for tensor, in every cell: the differential over the whole zoo;
3. the zoo's expectations: where a version breaks an entry differently from what the entry documents (the pinned
   line's behaviour), the cell is listed, as information (5.0-5.12 overwrite every loaded weight of custom code).

Prints a Markdown report (the README's "Before you bump transformers" table is its first part) and exits 1 when a
self-check or a differential fails. ``--models`` and ``--versions`` narrow it; ``--jobs`` runs environments at once.

    python tools/test_versions.py --jobs 2 > versions.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

README_MODELS = ("minicpmv_like", "minicpmv_like_fixed", "overwritten")
README_WORKAROUNDS = ("auto", "minicpmv-pos-cache")


def default_versions() -> list[str]:
    from packaging.version import Version

    from loadguard._infra import envs

    released = [Version(v) for v in envs.released_versions(">=5")]
    last_patch: dict[tuple[int, int], Version] = {}
    for version in released:
        key = (version.major, version.minor)
        last_patch[key] = max(last_patch.get(key, version), version)
    wanted = {Version("4.57.6"), Version("5.0.0"), *last_patch.values(), max(released)}
    return [str(v) for v in sorted(wanted)]


def failing(cell) -> dict[str, str]:
    from loadguard.report import failing as failing_findings

    return {f["tensor"]: f["status"] for f in failing_findings(cell.report["findings"])} if cell.report else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default=None, help="comma-separated transformers versions (default: see above)")
    parser.add_argument("--models", default=None, help="comma-separated zoo entries (default: every entry)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)

    from loadguard import zoo
    from loadguard._matrix.matrices import matrix
    from loadguard._scan import selfcheck
    from loadguard.cli._matrix_outputs import matrix_markdown

    versions = args.versions.split(",") if args.versions else default_versions()
    names = args.models.split(",") if args.models else [e.name for e in zoo.entries()]
    start = time.perf_counter()
    problems: list[str] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="loadguard-versions-") as workdir:
        folders = {name: str(zoo.build(name, Path(workdir) / name)) for name in names}
        print(f"versions: {', '.join(versions)}; {len(names)} zoo entries", file=sys.stderr)
        options = dict(workarounds=list(README_WORKAROUNDS), trust_remote_code=True, jobs=args.jobs)
        scanned = matrix(list(folders.values()), versions, **options)
        audited = matrix(list(folders.values()), versions, full=True, **options)
        for version in versions:
            check = scanned.selfchecks.get(version)
            if check is None:
                continue
            if not check.get("ok"):
                problems.append(
                    f"transformers {version}: scan self-check failed: {check.get('error') or '; '.join(check['differing'][:5])}"
                )
        for name, folder in folders.items():
            entry = zoo.get(name)
            for version in versions:
                scan_cell, full_cell = scanned.cell(folder, version), audited.cell(folder, version)
                if "unavailable" in (scan_cell.status, full_cell.status):
                    notes.append(f"{name} on {version}: not installable here ({scan_cell.error or full_cell.error})")
                    continue
                if scan_cell.status == "error" and full_cell.status == "error":  # refused alike: they agree
                    notes.append(
                        f"{name} on {version}: transformers {version} cannot load it at all ({full_cell.error[:160]})"
                    )
                    continue
                if scan_cell.status == "error" or full_cell.status == "error":
                    problems.append(
                        f"{name} on {version}: scan {scan_cell.status} {scan_cell.error}; audit {full_cell.status} {full_cell.error}"
                    )
                    continue
                predicted, invisible = selfcheck.reconcile(scan_cell.report["findings"], failing(full_cell), folder)
                if predicted != failing(full_cell):
                    problems.append(
                        f"{name} on {version}: scan predicts {predicted}, the full audit finds {failing(full_cell)}"
                    )
                if invisible:
                    notes.append(
                        f"{name} on {version}: {len(invisible)} predicted constant fill(s) onto the very constant the checkpoint holds (invisible to the audit)"
                    )
                expected = {f.tensor: f.status for f in entry.expected_for(2)} if not version.startswith("4.") else {}
                if failing(full_cell) != expected:
                    notes.append(
                        f"{name} on {version}: {len(failing(full_cell))} tensor(s) wrong where the entry documents {len(expected)}"
                    )
        shown = [folders[n] for n in README_MODELS if n in folders]
        table = None
        if shown:
            from dataclasses import replace

            subset = replace(
                scanned,
                models=tuple(shown),
                cells=tuple(c for c in scanned.cells if c.model in shown),
                workarounds=tuple(w for w in README_WORKAROUNDS if w != "auto"),
            )
            table = matrix_markdown(subset).replace(str(Path(workdir)) + "/", "")
    print("## Before you bump transformers (scan; the full audits agree cell for cell)\n")
    if table:
        print(table + "\n")
    print("## Self-check per version\n")
    for version in versions:
        check = scanned.selfchecks.get(version)
        state = "not run (environment unavailable)" if check is None else ("passed" if check.get("ok") else "FAILED")
        print(
            f"- transformers {version}: {state}"
            + (f" ({check.get('seconds', 0):.1f} s{', recorded' if check.get('cached') else ''})" if check else "")
        )
    print(f"\n## Differential over {len(names)} zoo entries x {len(versions)} versions\n")
    print("\n".join(f"- {p}" for p in problems) or "- every cell: scan == full audit")
    print("\n## Where a version breaks an entry otherwise than the entry documents (information)\n")
    print("\n".join(f"- {n}" for n in notes) or "- none")
    print(f"\n{time.perf_counter() - start:.0f} s in all", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
