"""The GitHub Action's step (action.yml): run ``loadguard scan`` or ``audit`` once over the models, then write the
SARIF file, print the workflow annotations, append the job summary and set the ``exit-code`` output, all from that one
run's JSON. Configured by environment variables (what action.yml's inputs become):

    LOADGUARD_MODELS            model folders or Hub ids, separated by spaces or newlines (default ".")
    LOADGUARD_COMMAND           scan (default) or audit
    LOADGUARD_ARGS              extra arguments (default "--trust-remote-code --workaround auto")
    LOADGUARD_SARIF             where to write the SARIF file (default loadguard.sarif)
    LOADGUARD_FAIL_ON_FINDINGS  "true" (default): exit 1 on findings; "false": only a model that cannot be checked fails

Runs anywhere (a test runs it); on GitHub, ``GITHUB_STEP_SUMMARY`` and ``GITHUB_OUTPUT`` are set by the runner.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path


def main() -> int:
    from loadguard.formats import Row
    from loadguard.formats import render_rows as render

    command = os.environ.get("LOADGUARD_COMMAND", "scan").strip() or "scan"
    if command not in ("scan", "audit"):
        print(f"::error title=loadguard::command must be scan or audit, not {command!r}")
        return 2
    models = os.environ.get("LOADGUARD_MODELS", ".").split() or ["."]
    extra = shlex.split(os.environ.get("LOADGUARD_ARGS", "--trust-remote-code --workaround auto"))
    rows: list[Row] = []
    codes: list[int] = []
    batches = [models] if command == "scan" else [[model] for model in models]  # scan takes a fleet, audit one model
    for batch in batches:
        done = subprocess.run(
            [sys.executable, "-m", "loadguard", command, *batch, *extra, "--format", "json"],
            capture_output=True,
            text=True,
        )
        sys.stderr.write(done.stderr)
        codes.append(done.returncode)
        documents = (
            [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
            if command == "scan"
            else [json.loads(done.stdout or "null")]
        )
        for document in documents:
            if document is None:
                rows.append(
                    Row.failed(
                        batch[0],
                        done.stderr.strip().splitlines()[0] if done.stderr.strip() else f"exit {done.returncode}",
                        None,
                        command,
                    )
                )
            elif command == "scan":
                rows.append(Row.from_scan(document))
            else:
                rows.append(Row.from_audit(document, batch[0]))
    Path(os.environ.get("LOADGUARD_SARIF", "loadguard.sarif")).write_text(
        render("sarif", rows, command=command) + "\n"
    )
    annotations = render(
        "github", rows, command=command
    )  # also appends the job summary when GITHUB_STEP_SUMMARY is set
    if annotations:
        print(annotations)
    if all(c == 2 for c in codes):
        code = 2
    elif any(c in (2, 3) for c in codes):
        code = 3  # some models checked, some not: partial
    else:
        code = max(codes)
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as stream:
            stream.write(f"exit-code={code}\n")
    if code == 1 and os.environ.get("LOADGUARD_FAIL_ON_FINDINGS", "true").lower() == "false":
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
