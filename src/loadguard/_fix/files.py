"""The files ``loadguard fix`` writes: a copy of the model folder with its code patched (weights hard-linked, or
symlinked across file systems: never copied, never rewritten), ``loadguard-fix.diff`` and ``LOADGUARD_FIX.md``.
Built in a hidden folder beside the output and renamed into place only once proven."""

from __future__ import annotations

import os
import shlex
import shutil
import uuid
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download

from .._files import HUB_ID, failure, hub_offline
from .._infra import cell, leaving, plural, remove_tree
from ..errors import InvalidOptionError, ModelNotFoundError
from ..report import FixStatus

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz", ".model")
DIFF = "loadguard-fix.diff"
NOTES = "LOADGUARD_FIX.md"


WEIGHT_PATTERNS = tuple(f"*{suffix}" for suffix in WEIGHTS if suffix != ".model") + ("*.onnx_data", "*.npy", "*.pkl")
"""What a Hub id's weightless fetch leaves out (``.model`` stays: a sentencepiece tokenizer, not weights)."""


def holds_weights(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint transformers reads (safetensors or ``.bin``, single or sharded)."""
    return any(
        entry.is_file() and (entry.suffix in (".safetensors", ".bin") or entry.name.endswith(".index.json"))
        for entry in folder.iterdir()
    )


def model_folder(target: str, weights: bool = True) -> Path:
    """The local folder of ``target``: itself, or a Hub id's snapshot in the standard Hugging Face cache (fetched once;
    the fixed copy links the weights there, where they stay). ``weights=False``: a Hub id's code, config and tokenizer
    only (a weightless fix)."""

    folder = Path(target)
    if folder.exists() or not HUB_ID.match(str(target)):
        if not folder.is_dir():
            raise ModelNotFoundError(
                f"{target} is not a model folder",
                "pass the folder holding config.json and the model's code, or a Hub id",
            )
        return folder

    try:
        return Path(snapshot_download(str(target), ignore_patterns=None if weights else list(WEIGHT_PATTERNS)))
    except Exception as error:  # offline, missing, gated: one line saying which
        raise failure(target, error, hub_offline()) from None


def _link(source: Path, target: Path) -> None:
    real = source.resolve()
    try:
        os.link(real, target)
    except OSError:  # another file system, or links not allowed: a symlink to the very file
        target.symlink_to(real)


def _copy_tree(source: Path, target: Path, patched: dict[str, str], top: Path) -> None:

    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if entry.name in ("__pycache__", ".git", DIFF, NOTES):
            continue
        relative = entry.relative_to(top).as_posix()
        if entry.is_symlink() and leaving(top, entry) is not None:
            # its content would land in the fixed copy (and in a pull request): never followed out of the model
            raise InvalidOptionError(
                f"{relative} in {top} is a link leaving the model's folder: refused, nothing written",
                "copy the file into the folder if it belongs to the model",
            )
        destination = target / entry.name
        if relative in patched:
            with open(destination, "w", encoding="utf-8", newline="") as handle:  # its line endings, as read
                handle.write(patched[relative])
        elif entry.is_dir():
            _copy_tree(entry, destination, patched, top)
        elif entry.name.endswith(WEIGHTS):
            _link(entry, destination)
        elif entry.is_file():
            shutil.copyfile(entry, destination)


def stage(folder: Path, out: Path, patched: dict[str, str], diff: str) -> Path:
    """The patched copy in a hidden folder beside ``out`` (``out`` itself is written only by :func:`publish`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.loadguard-fix-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        _copy_tree(folder, staging, patched, folder)
        (staging / DIFF).write_text(diff)
    except BaseException:
        remove_tree(staging.parent, staging, "the fix being staged")  # a copy refused halfway leaves nothing
        raise
    return staging


def publish(staging: Path, out: Path, result: Any) -> None:
    """``LOADGUARD_FIX.md`` written, then the proven copy renamed to ``out`` (an empty folder there is replaced)."""
    (staging / NOTES).write_text(notes(result))
    if out.is_dir():
        out.rmdir()  # empty: checked before anything was loaded
    staging.rename(out)


def _status_line(result: Any) -> str:
    return {
        FixStatus.FIXED: "Every tensor the load got wrong now loads right.",
        FixStatus.PARTLY: "Some tensors now load right; the rest need a change by hand (listed below).",
        FixStatus.UNVERIFIED: "The change was written without its proofs (`--no-verify`, or a proof could not run): check it before you merge it.",
    }.get(result.status, result.status)


def notes(result: Any) -> str:
    """The pull-request description: what was wrong, what changed, the evidence and the versions it was proven on."""
    lines = [
        "# Load correctly on transformers 5 (non-persistent buffers and `_init_weights`)",
        "",
        _status_line(result),
        "",
    ]
    lines += [
        "## What was wrong",
        "",
        "Since transformers 5.0, `from_pretrained` builds the model on the meta device and gives every non-persistent "
        "buffer fresh, uninitialized memory; only what the model's `_init_weights` rebuilds is restored "
        '(huggingface/transformers#48892, answered upstream as "fix per model"). Loading this model left:',
        "",
        "| tensor | status | made at |",
        "|---|---|---|",
    ]
    for finding in result.findings:  # names the model controls: one row each, no markup of theirs
        lines.append(
            f"| `{cell(finding.tensor)}` | {cell(finding.status)} | {f'`{cell(finding.location)}`' if finding.location else '-'} |"
        )
    if result.workarounds:
        lines += [
            "",
            "The code also needed these adjustments to load on transformers 5: "
            + ", ".join(f"`{w}`" for w in result.workarounds)
            + ".",
        ]
    lines += ["", "## What this change does", ""]
    for change in result.changes:
        lines.append(
            f"- `{change.file}`: {change.description}"
            + (f" ({plural(len(change.tensors), 'tensor')})" if change.tensors else "")
        )
    lines += [
        "",
        "Every recomputation is the model's own code, the expression or helper its `__init__` already uses, run again in "
        "`_init_weights`, where transformers 5 rebuilds tensors after loading. On transformers 4 `_init_weights` only runs "
        "for tensors missing from the checkpoint, and it recomputes what `__init__` computed: nothing changes there.",
    ]
    if result.refused:
        lines += ["", "## Left for a person", ""]
        for refusal in result.refused:
            where = f" (`{refusal.location}`)" if refusal.location else ""
            lines.append(f"- {f'`{refusal.tensor}`: ' if refusal.tensor else ''}{refusal.reason}{where}")
    if result.upstream:
        lines += [
            "",
            "## For transformers itself",
            "",
            "Tensors made by transformers' own classes need the change there (not applied, not proven "
            "by a load: it changes transformers):",
            "",
            "```diff",
            result.upstream.rstrip("\n"),
            "```",
        ]
    lines += ["", "## Evidence", ""]
    if not result.proofs:
        lines.append("- not proven: written with `--no-verify`")
    for proof in result.proofs:
        verdict = {True: "passed", False: "FAILED", None: "not run"}[proof.ok]
        lines.append(f"- transformers {proof.transformers}, {proof.name.replace('_', ' ')}: {verdict}. {proof.detail}")
    versions = ", ".join(f"{k} {v}" for k, v in sorted(result.versions.items()))
    lines += [
        "",
        f"Found with {versions}." if versions else "",
        "",
        "```diff",
        result.diff.rstrip("\n"),
        "```",
        "",
        *_reproduce(result),
    ]
    return "\n".join(lines)


def _repo(model: str) -> str:
    """The Hub repository the fixed model came from (its id), else a placeholder to fill in."""
    return model if HUB_ID.match(model) and not Path(model).exists() else "ORG/NAME"


def _reproduce(result: Any) -> list[str]:
    """How to check it again (with the flags the original's load needed), and the one command that proposes the change
    on the Hub with the ecosystem's own tool (the changed code files only)."""
    verb = "loadguard scan" if result.weightless else "loadguard audit"
    before = f"{verb} <original> --trust-remote-code" + (" --workaround auto" if result.workarounds else "")
    after = f"{verb} <this folder> --trust-remote-code"
    changed = sorted({change.file for change in result.changes})
    lines = [
        f"_Written by `loadguard fix`{' without weights' if result.weightless else ''}; reproduce with `{before}` "
        f"(before) and `{after}` (after)._",
        "",
    ]
    if changed:
        includes = " ".join(f"--include {shlex.quote(name)}" for name in changed)
        lines += [
            "To propose it on the Hugging Face Hub (a pull request with the changed code files only), from this folder:",
            "",
            "```bash",
            f"hf upload {_repo(result.model)} . . {includes} --create-pr "
            '--commit-message "Load correctly on transformers 5" --commit-description "$(cat LOADGUARD_FIX.md)"',
            "```",
            "",
        ]
    return lines


__all__ = ["DIFF", "NOTES", "WEIGHTS", "model_folder", "notes", "publish", "stage"]
