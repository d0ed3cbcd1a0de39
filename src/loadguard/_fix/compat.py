"""Proof (b) of ``loadguard fix``, from the process that planned the patch: under transformers 4 (the release the model
was written for, else 4.57.6; the matrix's environments, :mod:`loadguard._infra.envs`) the patched copy loads to the
same tensors and first forward pass as the original (:mod:`loadguard._fix.prove` runs that side), and the original's
outputs there are proof (c)'s reference."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import secrets
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from .._infra import envs, plural, procs
from .proofs import COMPAT_VERSION, Proof

RESULT_KEYS = ("transformers", "tensors", "differ", "differ_count", "forward")


def _run_prove(command: list[str], env: dict, timeout: float = 900) -> dict:
    """What the 4.x side (:mod:`loadguard._fix.prove`) found, through a channel of its own, never the stdout the model's
    code prints to: a file the child inherits as a descriptor, where it writes its result with the per-run nonce it read
    on stdin before any model code ran. A process that exits non-zero, or ends without that result (the model's code
    called ``os._exit``), proves nothing."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryFile("w+b") as channel, tempfile.TemporaryFile("w+") as output:
        result = subprocess.run(
            command,
            input=nonce + "\n",
            stdout=output,
            stderr=output,
            text=True,
            timeout=timeout,
            env={**env, "LOADGUARD_RESULT_FD": str(channel.fileno())},
            pass_fds=(channel.fileno(),),
            **procs.subprocess_options(),
        )  # a proof never outlives the run that started it
        channel.seek(0)
        written = channel.read()
        output.seek(0)
        last = [line for line in output.read().splitlines() if line.strip()]
    said = f": {last[-1][:300]}" if last else ""
    if result.returncode != 0:
        return {"error": f"its process exited with status {result.returncode}{said}"}
    try:
        envelope = json.loads(written)
    except ValueError:
        envelope = None
    document = envelope.get("result") if isinstance(envelope, dict) and envelope.get("nonce") == nonce else None
    if not isinstance(document, dict) or not ("error" in document or all(key in document for key in RESULT_KEYS)):
        return {"error": f"its process ended without writing loadguard's result (the model's code exited it?){said}"}
    return document


def written_for(folder: Path) -> tuple[str, ...]:
    """The transformers 4 releases proof (b) tries, in order: the one config.json says the model was saved with (older
    than 4.57 only: code written for it may not import on 4.57), then 4.57.6."""
    try:
        written = str(json.loads((folder / "config.json").read_text()).get("transformers_version") or "")
    except (OSError, ValueError, AttributeError):
        written = ""
    try:
        release = Version(written)
    except InvalidVersion:
        return (COMPAT_VERSION,)
    if release.major == 4 and release.minor < 57:  # a development build (4.41.0.dev0) is proven on its release
        return (release.base_version, COMPAT_VERSION)
    return (COMPAT_VERSION,)


def before_v5_on_first(
    versions: tuple[str, ...], folder: Path, staging: Path, *arguments: Any
) -> tuple[Proof, dict | None]:
    """Proof (b) on the first of ``versions`` whose environment can be made and where the original loads; the proof
    names the release it ran on, and why an earlier one was passed over. With it, the original's outputs there (proof
    (c)'s reference; None where none were taken)."""
    passed_over: list[str] = []
    for index, version in enumerate(versions):
        proof, seen = _unchanged_before_v5(folder, staging, version, *arguments)
        last = index == len(versions) - 1
        if last or not (proof.ok is None or proof.detail.startswith("could not be compared")):
            if passed_over:
                proof = dataclasses.replace(proof, detail=f"{proof.detail} (not on {'; '.join(passed_over)})")
            return proof, seen
        passed_over.append(f"{version}, which config.json names: {proof.detail}")
    raise AssertionError("no transformers 4 release to prove on")  # versions is never empty


def _unchanged_before_v5(
    folder: Path,
    staging: Path,
    version: str,
    workarounds: tuple[str, ...],
    class_name: str | None = None,
    weightless: bool = False,
    outputs: bool = True,
    ids: list | None = None,
) -> tuple[Proof, dict | None]:
    """(b): under transformers ``version`` the patched copy loads to the same tensors and first forward as the original
    (``weightless``: both constructed from the config build the same buffers and tensor attributes, and parameters of
    the same names, shapes and dtypes). ``class_name``: the class the transformers 5 side loaded; both load as it here."""

    proof = functools.partial(Proof, "unchanged_before_v5", weightless=weightless)
    environment = envs.environment(version)
    if not environment.ok:
        return proof(
            version,
            None,
            f"not run: the transformers {version} environment could not be created ({environment.reason})",
        ), None
    env = {**os.environ, "HF_MODULES_CACHE": str(environment.folder / "hf_modules"), "HF_HUB_OFFLINE": "1"}
    command = [
        str(environment.python),
        "-m",
        "loadguard._fix.prove",
        str(folder.resolve()),
        str(staging.resolve()),
        ",".join(workarounds),
        class_name or "",
        "weightless" if weightless else "loaded",
    ]
    with tempfile.TemporaryDirectory(prefix="loadguard-outputs-") as scratch:
        values, prompt = Path(scratch, "values.pt"), Path(scratch, "ids.json")
        prompt.write_text(json.dumps(ids) if ids else "")
        document = _run_prove(command + ([str(values), str(prompt)] if outputs else []), env)
        seen = _reference_outputs(document.get("outputs"), values)
    if "error" in document:
        return proof(version, False, f"could not be compared: {document['error']}"), None
    if document["differ_count"]:
        return proof(
            version,
            False,
            f"{plural(document['differ_count'], 'tensor')} differ from the original's: {', '.join(document['differ'][:6])}",
        ), seen
    if document["forward"].startswith("differs") and not document.get("repaired"):
        return proof(version, False, f"the first forward pass {document['forward']}"), seen
    repaired = document.get("repaired") or []
    same = document["tensors"] - len(repaired)
    also = (
        f"; {', '.join(repaired[:4])} ({len(repaired)}) the original loads wrong here too now equal what the code computes"
        if repaired
        else ""
    )
    if weightless:
        return proof(
            document["transformers"],
            True,
            f"built from the config without weights: {document['valued']} buffers and tensor attributes bit-identical "
            f"to the original's, {document['tensors'] - document['valued']} parameters of the same names, shapes and "
            f"dtypes ({document.get('class', class_name)}); no forward pass without weights",
        ), seen
    return proof(
        document["transformers"],
        True,
        f"{same} of {plural(document['tensors'], 'tensor')} bit-identical to the original's{also}; first forward: "
        f"{document['forward']} ({document.get('class', class_name)})",
    ), seen


def _reference_outputs(document: Any, values: Path) -> dict | None:
    """The original's outputs as the 4.x side reported them, its values read back from the file it wrote (tensors
    only, and only when the file is the one whose SHA-256 it reported)."""
    import torch

    if not isinstance(document, dict):
        return None
    seen = dict(document)
    seen["values"] = None
    digest = seen.pop("values_sha256", None)
    if digest and values.is_file() and hashlib.sha256(values.read_bytes()).hexdigest() == digest:
        loaded = torch.load(values, weights_only=True)
        seen["values"] = loaded if isinstance(loaded, torch.Tensor) else None
    return seen


__all__ = ["before_v5_on_first", "written_for"]
