"""The files ``loadguard fix`` writes: a copy of the model folder with its code patched (weights hard-linked, or
symlinked across file systems: never copied, never rewritten), ``loadguard-fix.diff`` and ``LOADGUARD_FIX.md``.
Built in a hidden folder beside the output and renamed into place only once proven."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import uuid
from pathlib import Path
from typing import Any

from huggingface_hub import constants, snapshot_download

from .._files import HUB_ID, failure, hub_offline
from .._infra import code, collapse_names, fence, inert, leaving, remove_tree
from ..errors import InvalidOptionError, ModelNotFoundError
from ..report import ChangeKind, Status
from ..runner import REBUILT
from .words import BUFFERS, changed

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz", ".model")
LINKED = WEIGHTS + (".onnx_data", ".npy", ".pkl")
"""What the fixed copy links (or copies with ``--copy-weights``) rather than copies: weights and other large data."""
DIFF = "loadguard-fix.diff"
NOTES = "LOADGUARD_FIX.md"
PROPOSE = "loadguard-propose.sh"
"""The command that opens the pull request on the Hub, kept beside the description it uploads (never inside it)."""


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
        if entry.name in ("__pycache__", ".git", DIFF, NOTES, PROPOSE):
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


_CACHED_STAGING = re.compile(r"_loadguard_hyphen_fix_hyphen_(?P<pid>\d+)_hyphen_[0-9a-f]{8}$")


def modules_cache() -> Path:
    """Where transformers copies remote code (``HF_MODULES_CACHE``), found as transformers finds it, without importing
    transformers (the ``loadguard`` process never does)."""
    if os.environ.get("HF_MODULES_CACHE"):
        return Path(os.environ["HF_MODULES_CACHE"])
    return Path(constants.HF_HOME) / "modules"


def remove_stale(parent: Path) -> list[str]:
    """What a run killed before it could clean up (``SIGKILL``, a timeout, a memory limit, a second ``SIGTERM``) left
    behind, removed when its process is gone: its staging folders in ``parent``, and the copies of their code
    transformers kept in its modules cache (``transformers_modules/..._loadguard_hyphen_fix_hyphen_<pid>_...``); their
    names."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            match = _STAGING.match(entry.name)
            if match and int(match["pid"]) != os.getpid() and _dead(int(match["pid"])) and not entry.is_symlink():
                with contextlib.suppress(OSError):  # one that cannot be removed does not stop this run
                    remove_tree(parent, entry, "a staging folder a killed run left")
                    removed.append(entry.name)
    modules = modules_cache() / "transformers_modules"
    with contextlib.suppress(OSError):
        for entry in modules.iterdir():
            match = _CACHED_STAGING.search(entry.name)
            if match and int(match["pid"]) != os.getpid() and _dead(int(match["pid"])) and not entry.is_symlink():
                with contextlib.suppress(OSError):
                    remove_tree(modules, entry, "the modules cache copy of a staging folder a killed run left")
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
    """``LOADGUARD_FIX.md`` and the command that proposes it written, then the proven copy renamed to ``out`` (an empty
    folder there is replaced)."""
    (staging / NOTES).write_text(notes(result))
    script = propose_script(result)
    if script is not None:
        (staging / PROPOSE).write_text(script)
        (staging / PROPOSE).chmod(0o755)
    if out.is_dir():
        out.rmdir()  # empty: checked before anything was loaded
    staging.rename(out)


CHECKED_BY_STATUS = (Status.UNINITIALIZED, Status.ON_META)
"""The statuses the reproduction shows with plain torch: leftover memory filled with NaN / the dtype's max, or meta."""


def model_name(result: Any) -> str:
    """How the pull request names the model: its Hub id, else its folder's name (never a path of this machine)."""
    name = str(result.model).rstrip("/")
    return name if HUB_ID.match(name) and not Path(name).exists() else Path(name).name or name


def _evidence(proof: Any) -> str:
    verdict = {True: "passed", False: "FAILED", None: "not run"}[proof.ok]
    where = f"transformers {proof.transformers}" if proof.transformers else "static"
    return f"- {inert(where)}, {proof.name.replace('_', ' ')}: {verdict}. {inert(proof.said)}"


def _reproduction(result: Any, name: str) -> list[str]:
    """A script a maintainer runs with plain transformers and torch: the tensors left uninitialized, before and after."""
    auto = result.auto_class or "AutoModel"
    shown = [f.tensor for f in result.findings if f.status in CHECKED_BY_STATUS][:12]
    load = f"model = {auto}.from_pretrained({json.dumps(name)}, trust_remote_code=True)"
    if not shown:
        return [
            "With transformers 5 this raises before the change and loads after it:",
            "",
            fence(f"from transformers import {auto}\n\n{load}", "python"),
        ]
    return [
        "With transformers 5 and torch alone (uninitialized memory made deterministic: NaN for floats, the largest value "
        "for integers; a boolean buffer cannot be told from data this way):",
        "",
        fence(
            "\n".join(
                [
                    "import torch",
                    f"from transformers import {auto}",
                    "",
                    "torch.use_deterministic_algorithms(True, warn_only=True)",
                    "torch.utils.deterministic.fill_uninitialized_memory = True",
                    load,
                    f"for name in {json.dumps(shown)}:",
                    '    module, _, attribute = name.rpartition(".")',
                    "    tensor = getattr(model.get_submodule(module), attribute)",
                    "    if tensor.is_meta:",
                    '        print(name, "left on the meta device")',
                    "    elif tensor.is_floating_point():",
                    '        print(name, "uninitialized" if tensor.isnan().any() else "ok")',
                    "    elif tensor.dtype != torch.bool:",
                    '        print(name, "uninitialized" if (tensor == torch.iinfo(tensor.dtype).max).any() else "ok")',
                ]
            ),
            "python",
        ),
        "",
        "Before this change it prints `uninitialized` for each; after it, `ok`.",
    ]


def notes(result: Any) -> str:
    """The pull-request description, for the model's maintainer: what transformers 5 changed, what goes wrong with this
    model, what the change does, how it was checked and a reproduction with plain transformers and torch; the diff
    last. Everything the model controls (names, paths of its files, messages) is rendered inert."""
    name = model_name(result)
    lines = ["# Load correctly with transformers 5", "", "## Why", ""]
    if result.findings:
        lines.append(f"- {BUFFERS}")
    for workaround in result.workarounds:
        described = next((c.description for c in result.changes if c.workaround == workaround), workaround)
        lines.append(f"- {changed(workaround, inert(described))}")
    if result.findings:
        lines += ["", f"## What goes wrong with {inert(name)} today", ""]
        groups: dict[tuple[str, str], list[str]] = {}
        for finding in result.findings:
            status = f"{finding.status} ({REBUILT})" if REBUILT in finding.detail else str(finding.status)
            groups.setdefault((status, finding.location or ""), []).append(finding.tensor)
        for (status, location), tensors in groups.items():
            made = f", made at {code(location)}" if location else ""
            lines.append(f"- {', '.join(code(t) for t in collapse_names(tensors))}: {inert(status)}{made}")
        if any(REBUILT in f.detail for f in result.findings):
            lines += [
                "",
                f"A tensor marked *{REBUILT}* holds leftover memory after loading, and the model's own code rebuilds it "
                "during its first forward pass before reading it: the outputs were right either way.",
            ]
    lines += ["", "## What this change does", ""]
    for change in result.changes:
        lines.append(f"- {code(change.file)}: {inert(change.description)}")
    if any(c.kind == ChangeKind.RECOMPUTE for c in result.changes):
        lines += [
            "",
            "Each recomputation runs the expression or helper `__init__` already uses, in `_init_weights`, where "
            "transformers 5 rebuilds tensors after loading. On transformers 4 `_init_weights` runs only for weights "
            "missing from the checkpoint and recomputes the same values: nothing changes there.",
        ]
    if result.refused:
        lines += ["", "## Left to do by hand", ""]
        for refusal in result.refused:
            where = f" ({code(refusal.location)})" if refusal.location else ""
            lines.append(f"- {code(refusal.tensor) + ': ' if refusal.tensor else ''}{inert(refusal.reason)}{where}")
    lines += ["", "## How it was checked", ""]
    if result.weightless:
        lines.append(
            "- without the weights (only the code and the config were at hand): the load was predicted from the config "
            "and the checkpoint's names, and the outputs compared with the same synthetic weights on both sides"
        )
    lines += [_evidence(proof) for proof in result.proofs]
    if not any(proof.transformers for proof in result.proofs):
        lines.append("- not proven on any transformers release: written with `--no-verify`")
    if result.unrun:
        lines.append(f"- lines of this change no check ran: {', '.join(code(place) for place in result.unrun[:8])}")
    versions = ", ".join(f"{inert(k)} {inert(v)}" for k, v in sorted(result.versions.items()) if k != "torch_build")
    if versions:
        lines.append(f"- found with {versions}")
    lines += ["", "## Reproduce", "", *_reproduction(result, name), "", "## The change", ""]
    lines += [fence(result.diff.rstrip("\n"), "diff"), ""]
    if result.upstream:
        lines += [
            "## For transformers itself",
            "",
            "Tensors made by transformers' own classes need the change there (not part of this pull request, not "
            "proven by a load):",
            "",
            fence(result.upstream.rstrip("\n"), "diff"),
            "",
        ]
    lines += ["_Generated and checked with `loadguard fix`._", ""]
    return "\n".join(lines)


def propose_command(result: Any) -> list[str] | None:
    """``hf upload REPO . . --include FILE... --create-pr ...``: the changed code files only, as one pull request; None
    without a change. REPO: the model's Hub id, else the shell variable ``REPO_ID`` (a folder's repository is not known
    here: the script refuses to run until it is set)."""
    changed_files = sorted({change.file for change in result.changes})
    if not changed_files:
        return None
    repo = model_name(result) if HUB_ID.match(model_name(result)) else "${REPO_ID:?set REPO_ID to the model's Hub id}"
    words = ["hf", "upload", repo, ".", "."]
    for name in changed_files:
        words += ["--include", name]
    return words + ["--create-pr", "--commit-message", "Load correctly with transformers 5"]


def propose_script(result: Any) -> str | None:
    """The content of :data:`PROPOSE`: run from the fixed copy, it opens the pull request with LOADGUARD_FIX.md as its
    description."""
    words = propose_command(result)
    if words is None:
        return None
    repo = words[2]
    quoted = shlex.join(words[:2]) + " " + (f'"{repo}"' if repo.startswith("${") else shlex.quote(repo))
    quoted += " " + shlex.join(words[3:])
    return (
        "#!/bin/sh\n# Opens a pull request with the changed code files only, LOADGUARD_FIX.md as its description.\n"
        'cd "$(dirname "$0")" || exit 1\n'
        f'{quoted} --commit-description "$(cat {NOTES})"\n'
    )


__all__ = [
    "DIFF",
    "PROPOSE",
    "model_name",
    "propose_command",
    "propose_script",
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
