"""A matrix environment's cell worker: ``python -m loadguard.cli._cells`` inside one transformers version's env.

It imports torch, transformers and loadguard once, then runs each cell it is sent (a ``loadguard`` command line,
one JSON list per line on stdin) in a child forked for that cell alone: the child has imported no model's code,
runs the command, and exits, so one model's remote code cannot leak into the next cell, while a cell costs its
scan, not another 5-7 s of importing torch and transformers. Each result is one JSON line on stdout:
``{"returncode": int, "stdout": str, "stderr": str}``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from loadguard._infra import forks as _forks
from loadguard._scan import warm


def _command(arguments: list[str]) -> dict:
    """In the child: one ``loadguard`` command line, its stdout and stderr captured."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        code = 2
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", closefd=False)
        from loadguard.cli import main

        try:
            main(arguments)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 0
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out.seek(0)
        err.seek(0)
        return {"returncode": code, "stdout": out.read(), "stderr": err.read()}


def _run(message: list[str] | dict) -> dict:
    """A cell in a child forked for it alone (:mod:`loadguard._infra.forks`, the pool scan fleets use too), killed past its
    ``timeout`` (seconds) or ``memory_limit`` (bytes the child adds), when the message gives them."""

    if isinstance(message, list):  # a bare command line
        message = {"arguments": message}
    (outcome,) = _forks.run(
        _command, [message["arguments"]], timeout=message.get("timeout"), memory_limit=message.get("memory_limit")
    )
    if outcome.ok:
        return outcome.value
    return {"returncode": 2, "stdout": "", "stderr": f"Error: the cell's process failed: {outcome.error}\n"}


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch  # noqa: F401  (loaded once, before any fork)
    import transformers  # noqa: F401
    from transformers import PreTrainedModel  # noqa: F401

    warm()  # a first scan's work done once here, not in every cell's child

    print(json.dumps({"ready": transformers.__version__, "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(_run(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
