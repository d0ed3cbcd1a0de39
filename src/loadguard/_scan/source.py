"""Where a scan's model comes from: its config and code (a local folder, a Hub id: only ``*.json``/``*.py``, or a
config object) and, when they can be had without weights, the checkpoint's keys, shapes and dtypes (safetensors
headers, locally or by HTTP range reads; a ``.bin`` index names keys only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import _files
from .._files import (
    BIN_INDEX,
    BIN_SINGLE,
    SAFETENSORS_DTYPES,
    SAFETENSORS_INDEX,
    SAFETENSORS_SINGLE,
    Checkpoint,
    bin_header,
    config_dict,
    folder_of,
    hub,
    index_files,
    missing,
)
from .._infra import leaving
from ..errors import CheckpointError, InvalidOptionError, RemoteCodeNotTrustedError

_HUB_PATTERNS = ["*.json", "*.py", "*.txt", "*.model", "*.tiktoken"]


@dataclass
class Source:
    """Where a model's config and code are, and the checkpoint's keys when they can be had without weights."""

    name: str
    folder: Path | None
    config: dict
    header: dict[str, tuple[tuple[int, ...], torch.dtype]] | None
    header_from: str | None
    config_object: Any = None
    revision: str | None = None
    """The commit a Hub id resolved to (None for a local folder or a config)."""
    fetched_bytes: int | None = None
    """File content fetched from the Hub for this scan (0 when the cache had it all; None: not from the Hub)."""


def source(
    path_or_config: Any,
    trust_remote_code: bool,
    revision: str | None,
    *,
    header: bool,
    hub_header: bool,
    follow_links: bool = False,
) -> Source:
    from transformers import PretrainedConfig

    if isinstance(path_or_config, PretrainedConfig):
        config = path_or_config
        folder = folder_of(config)
        document = config_dict(config)
        if document.get("auto_map") and not trust_remote_code:
            raise RemoteCodeNotTrustedError(
                f"{type(config).__name__} names its own code (auto_map) and trust_remote_code was not given",
                "pass trust_remote_code=True if you trust it",
            )
        return Source(config._name_or_path or type(config).__name__, folder, document, None, None, config)
    text = str(path_or_config)
    if Path(text).exists():
        folder = Path(text)
        if not follow_links:
            _own_files(folder)
        config = _files.read_config(folder, trust_remote_code)
        shapes, where = _local_header(folder) if header else (None, None)
        return Source(text, folder, config, shapes, where)
    refused = missing(text)
    if refused is not None:
        raise refused
    return _hub_source(text, trust_remote_code, revision, hub_header)


def _own_files(folder: Path) -> None:
    """A weightless scan reads the model's own files only: a config, index or checkpoint that is a link leading out of
    the folder (a Hub snapshot's blobs excepted) is refused unless the user says to follow it."""

    names = [
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
    ]
    names += [entry.name for entry in folder.glob("*.safetensors")] if folder.is_dir() else []
    for name in dict.fromkeys(names):
        target = leaving(folder, folder / name)
        if target is not None:
            raise InvalidOptionError(
                f"{folder / name} is a link to {target}, outside the model's folder: refused (a scan reads the model's own files only)",
                "pass --follow-links (follow_links=True) if the link is meant, or copy the file into the folder",
            )


def _local_header(folder: Path) -> tuple[dict | None, str | None]:
    """Keys, shapes and dtypes of a local checkpoint, read from its safetensors headers, or from a ``.bin``
    checkpoint's pickle without loading its data (:mod:`loadguard._files.headers`): never a weight byte."""

    if not any((folder / name).is_file() for name in (SAFETENSORS_INDEX, SAFETENSORS_SINGLE)):
        index = folder / BIN_INDEX
        files = (
            index_files(index) if index.is_file() else [folder / BIN_SINGLE] if (folder / BIN_SINGLE).is_file() else []
        )
        if files:
            shapes: dict = {}
            for file in files:
                shapes.update(bin_header(file))
            return shapes, str(index if index.is_file() else files[0])
    try:
        checkpoint = Checkpoint.open(folder)
    except CheckpointError as error:
        if "holds no checkpoint" in error.message:
            return None, None
        raise
    try:
        if checkpoint.format == "safetensors":
            return {key: (checkpoint.shape(key), checkpoint.dtype(key)) for key in checkpoint.keys()}, str(
                checkpoint.path
            )
    finally:
        checkpoint.close()
    return None, None


def _hub_source(repo_id: str, trust_remote_code: bool, revision: str | None, header: bool) -> Source:
    """Only ``*.json`` and ``*.py`` from the Hub (the cache when offline), at ``revision`` (or the one after ``@`` in the
    id); the safetensors headers by range reads (:mod:`loadguard._files.hub`). The source names the commit it resolved and
    the bytes it fetched."""

    name, pinned = hub.split_id(repo_id)
    revision = revision or pinned
    offline = _files.hub_offline()
    fetched = hub.Fetched()
    folder = hub.snapshot(name, revision, _HUB_PATTERNS, offline, fetched)
    config = _files.read_config(folder, trust_remote_code)
    shapes, where = (None, None)
    if header:
        shapes, where = _hub_header(name, fetched.commit, folder, offline, fetched)
    return Source(repo_id, folder, config, shapes, where, revision=fetched.commit, fetched_bytes=fetched.bytes)


def _hub_header(repo_id: str, commit: str, folder: Path, offline: bool, fetched) -> tuple[dict | None, str | None]:

    if offline:  # only what is cached: complete safetensors files there have readable headers
        return _local_header(folder) if any(folder.glob("*.safetensors")) else (None, None)
    found = hub.headers(repo_id, commit, folder, fetched)
    if found is None:
        return None, None
    shapes = {}
    for header in found.values():
        for key, info in header.items():
            if key != "__metadata__":
                shapes[key] = (tuple(info["shape"]), SAFETENSORS_DTYPES[info["dtype"]])
    return shapes, f"{repo_id}@{commit} (safetensors headers)"


def load_config(source: Source, trust_remote_code: bool):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(source.folder), trust_remote_code=trust_remote_code)


def quantization(config: dict) -> str | None:
    """The quantization method a config.json declares (``quantization_config.quant_method``, at its top or in its text
    config), None for an unquantized model."""
    for document in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else None):
        found = (document or {}).get("quantization_config")
        if isinstance(found, dict):
            return str(found.get("quant_method") or "unknown")
    return None


def drop_quantization(config: Any) -> None:
    """Remove the quantization settings from a loaded config (and its text config) for a weightless load."""
    for target in (config, getattr(config, "text_config", None)):
        if target is not None and "quantization_config" in vars(target):
            delattr(target, "quantization_config")  # 4.57 asks hasattr(), 5.x getattr(..., None): gone answers both


__all__ = ["Source", "drop_quantization", "load_config", "quantization", "source"]
