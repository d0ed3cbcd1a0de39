"""The files ``loadguard fix`` writes: a copy of the model folder with its code patched (weights hard-linked, or
symlinked across file systems: never copied, never rewritten), ``loadguard-fix.diff`` and ``LOADGUARD_FIX.md``.
Built in a hidden folder beside the output and renamed into place only once proven."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import uuid
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download

from .._files import HUB_ID, failure, hub_offline
from .._infra import cell, code, fence, inert, leaving, plural, remove_tree
from ..errors import InvalidOptionError, ModelNotFoundError
from ..report import FixStatus
from ..runner import REBUILT

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz", ".model")
LINKED = WEIGHTS + (".onnx_data", ".npy", ".pkl")
"""What the fixed copy links (or copies with ``--copy-weights``) rather than copies: weights and other large data."""
DIFF = "loadguard-fix.diff"
NOTES = "LOADGUARD_FIX.md"


WEIGHT_PATTERNS = tuple(f"*{suffix}" for suffix in LINKED if suffix != ".model")
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


def _link(source: Path, target: Path, copy: bool) -> str:
    """``target`` is ``source``'s data: a copy (``copy``), else a hard link, else (another file system, links not
    allowed) a symbolic link to the very file; which one it is."""
    real = source.resolve()
    if copy:
        shutil.copyfile(real, target)
        return "copied"
    try:
        os.link(real, target)
        return "hard-linked"
    except OSError:
        target.symlink_to(real)
        return "symlinked"


def _copy_tree(source: Path, target: Path, patched: dict[str, str], top: Path, how: set[str], copy: bool) -> None:

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
            _copy_tree(entry, destination, patched, top, how, copy)
        elif entry.name.endswith(LINKED):
            how.add(_link(entry, destination, copy))
        elif entry.is_file():
            shutil.copyfile(entry, destination)


_MARK = ".loadguard-fix-"
_STAGING = re.compile(r"^\..+" + re.escape(_MARK) + r"(?P<pid>\d+)-[0-9a-f]{8}$")


def cached_module_glob(staging: str) -> str:
    """The glob matching the copy transformers keeps of a staging folder's code in its modules cache: it names a
    folder's module after the folder, ``.`` as ``_dot_`` and ``-`` as ``_hyphen_`` (one name per run: the pid and a
    random tag). ``""`` for a name that is no staging folder's."""
    if not _STAGING.match(staging):
        return ""
    tail = staging.rsplit(_MARK, 1)[-1].replace("-", "_hyphen_")
    return f"*{_MARK.strip('.').replace('-', '_hyphen_')}{tail}"


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def remove_stale(parent: Path) -> list[str]:
    """Staging folders in ``parent`` that a run killed before it could clean up (``SIGKILL``, a second ``SIGTERM``)
    left behind: those whose process is gone are removed; their names."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            match = _STAGING.match(entry.name)
            if match and int(match["pid"]) != os.getpid() and _dead(int(match["pid"])) and not entry.is_symlink():
                with contextlib.suppress(OSError):  # one that cannot be removed does not stop this run
                    remove_tree(parent, entry, "a staging folder a killed run left")
                    removed.append(entry.name)
    return removed


def stage(folder: Path, out: Path, patched: dict[str, str], diff: str, copy_weights: bool = False) -> tuple[Path, str]:
    """The patched copy in a hidden folder beside ``out`` (``out`` itself is written only by :func:`publish`), and how
    it holds the weights (``hard-linked``, ``symlinked``, ``copied``, several joined by ``+``; ``""``: none); the
    staging folders of dead runs there are removed first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out.parent)
    staging = out.parent / f".{out.name}{_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    how: set[str] = set()
    try:
        _copy_tree(folder, staging, patched, folder, how, copy_weights)
        (staging / DIFF).write_text(diff)
    except BaseException:
        remove_tree(staging.parent, staging, "the fix being staged")  # a copy refused halfway leaves nothing
        raise
    return staging, "+".join(sorted(how))


def digest(folder: Path) -> dict[str, str]:
    """What each entry of a staged copy is, to see whether anything changed it: a file's SHA-256, a link's target, a
    weight file's inode, size and modification time (linked, never read: it may be 15 GB), a folder as a folder."""
    out: dict[str, str] = {}
    for root, folders, files in os.walk(folder):  # links to folders are entries, not followed
        for name in folders + files:
            path = Path(root, name)
            relative, info = path.relative_to(folder).as_posix(), path.lstat()
            if path.is_symlink():
                out[relative] = f"link to {os.readlink(path)}"
            elif path.is_dir():
                out[relative] = "folder"
            elif name.endswith(LINKED):
                out[relative] = f"weights {info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
            else:
                out[relative] = "sha256 " + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def tampered(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What changed between two :func:`digest` s of one folder: ``"x.py changed"``, ``"y added"``, ``"z removed"``."""
    return [
        f"{name} {'added' if name not in before else 'removed' if name not in after else 'changed'}"
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    ]


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
        status = f"{finding.status} ({REBUILT})" if REBUILT in finding.detail else str(finding.status)
        lines.append(
            f"| {code(finding.tensor, table=True)} | {cell(status)} | "
            f"{code(finding.location, table=True) if finding.location else '-'} |"
        )
    if any(REBUILT in f.detail for f in result.findings):
        lines += [
            "",
            f"A tensor marked *{REBUILT}* holds leftover memory after loading, and the model's own code rebuilds it "
            "during its first forward pass before reading it (its outputs equal a second pass's): the outputs were "
            "right either way; the change makes the loaded model right from the start.",
        ]
    if result.workarounds:
        lines += [
            "",
            "The code also needed these adjustments to load on transformers 5: "
            + ", ".join(code(w) for w in result.workarounds)
            + ".",
        ]
    lines += ["", "## What this change does", ""]
    for change in result.changes:
        lines.append(
            f"- {code(change.file)}: {inert(change.description)}"
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
            where = f" ({code(refusal.location)})" if refusal.location else ""
            lines.append(f"- {code(refusal.tensor) + ': ' if refusal.tensor else ''}{inert(refusal.reason)}{where}")
    if result.upstream:
        lines += [
            "",
            "## For transformers itself",
            "",
            "Tensors made by transformers' own classes need the change there (not applied, not proven "
            "by a load: it changes transformers):",
            "",
            fence(result.upstream.rstrip("\n"), "diff"),
        ]
    lines += ["", "## Evidence", ""]
    if not result.proofs:
        lines.append("- not proven: written with `--no-verify`")
    for proof in result.proofs:
        verdict = {True: "passed", False: "FAILED", None: "not run"}[proof.ok]
        lines.append(
            f"- transformers {inert(proof.transformers)}, {proof.name.replace('_', ' ')}: {verdict}. {inert(proof.said)}"
        )
    versions = ", ".join(f"{inert(k)} {inert(v)}" for k, v in sorted(result.versions.items()))
    lines += [
        "",
        f"Found with {versions}." if versions else "",
        "",
        fence(result.diff.rstrip("\n"), "diff"),
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
        f"_Written by `loadguard fix`{' without weights' if result.weightless else ''}; reproduce with {code(before)} "
        f"(before) and {code(after)} (after)._",
        "",
    ]
    if changed:
        includes = " ".join(f"--include {shlex.quote(name)}" for name in changed)
        lines += [
            "To propose it on the Hugging Face Hub (a pull request with the changed code files only), from this folder:",
            "",
            fence(
                f"hf upload {_repo(result.model)} . . {includes} --create-pr "
                '--commit-message "Load correctly on transformers 5" --commit-description "$(cat LOADGUARD_FIX.md)"',
                "bash",
            ),
            "",
        ]
    return lines


__all__ = [
    "DIFF",
    "LINKED",
    "NOTES",
    "WEIGHTS",
    "digest",
    "model_folder",
    "notes",
    "publish",
    "remove_stale",
    "stage",
    "tampered",
]
