"""Reading checkpoints lazily, tensor by tensor (key mapping: :mod:`loadguard._files.keymap`).

Safetensors files (single or sharded with an index) are memory-mapped and read as zero-copy views: a
tensor is paged in when compared and never copied. ``.bin`` checkpoints are read with
``torch.load(weights_only=True, mmap=True)`` only.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from .._infra import named, unreadable_because
from ..errors import CheckpointError

SAFETENSORS_SINGLE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_SINGLE = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"

SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
for _name, _attr in (
    ("F8_E4M3", "float8_e4m3fn"),
    ("F8_E5M2", "float8_e5m2"),
    ("U16", "uint16"),
    ("U32", "uint32"),
    ("U64", "uint64"),
):
    if hasattr(torch, _attr):
        SAFETENSORS_DTYPES[_name] = getattr(torch, _attr)


@dataclass(frozen=True)
class _Location:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


class _SafetensorsFile:
    """One memory-mapped safetensors file, its header validated against the file's size."""

    def __init__(self, path: Path):
        self.path = path
        try:
            size = path.stat().st_size
            with open(path, "rb") as handle:
                raw_length = handle.read(8)
                if len(raw_length) < 8:
                    raise ValueError("the file is shorter than a safetensors header")
                (length,) = struct.unpack("<Q", raw_length)
                if length > size - 8:  # its bytes are not shown: the file may be anything (a link to a secret)
                    raise ValueError("its first 8 bytes are not the length of a header that fits in the file")
                header = json.loads(handle.read(length))
        except (OSError, ValueError) as error:  # where, never what: the file may be anything (a link to a secret)
            raise CheckpointError(
                f"{named(path)} is not a readable safetensors file ({unreadable_because(error)})",
                "the file is corrupt or truncated: download or save the checkpoint again",
            ) from None
        data_start = 8 + length
        self.locations: dict[str, _Location] = {}
        if not isinstance(header, dict):
            raise _corrupt(path, "the header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise _corrupt(
                path, "its __metadata__ is not a map of strings to strings (safetensors refuses such a file)"
            )
        self.metadata = metadata
        for key, info in header.items():
            try:
                begin, end = info["data_offsets"]
                dtype_name, shape = info["dtype"], tuple(info["shape"])
                if not all(type(v) is int and v >= 0 for v in (begin, end, *shape)) or begin > end:
                    raise ValueError
            except (KeyError, TypeError, ValueError):
                raise _corrupt(
                    path,
                    f"the header entry for {key!r} is malformed (offsets and shape must be non-negative integers)",
                ) from None
            if data_start + end > size:
                raise CheckpointError(
                    f"{path} is truncated: {key!r} ends at byte {data_start + end} but the file has {size}",
                    "download or save the checkpoint again",
                )
            dtype = SAFETENSORS_DTYPES.get(dtype_name)
            if dtype is None:
                raise CheckpointError(
                    f"{path}: {key!r} has dtype {dtype_name}, which this torch cannot represent",
                    "upgrade torch or audit without the checkpoint (checkpoint=False)",
                )
            numel = 1
            for dim in shape:
                numel *= dim
            if end - begin != numel * torch.empty((), dtype=dtype).element_size():
                raise _corrupt(
                    path,
                    f"{key!r} spans {end - begin} bytes, but {dtype_name} of shape {list(shape)} takes {numel * torch.empty((), dtype=dtype).element_size()}",
                )
            self.locations[key] = _Location(path, dtype, shape, data_start + begin, data_start + end)
        # as safetensors itself requires: the tensors tile the data exactly, in order, to the end of the file
        reached = data_start
        for location in sorted(self.locations.values(), key=lambda item: (item.start, item.end)):
            if location.start != reached:
                raise _corrupt(
                    path,
                    f"tensor data {'overlaps' if location.start < reached else 'leaves a gap'} at byte {min(location.start, reached)}",
                )
            reached = location.end
        if reached != size:
            raise _corrupt(path, f"the tensors end at byte {reached} but the file has {size}")
        self._map: mmap.mmap | None = None

    def view(self, location: _Location) -> torch.Tensor:
        """A zero-copy CPU tensor over the file's bytes (copy-on-write mapping: the file never changes)."""
        if self._map is None:
            with open(self.path, "rb") as handle:
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        count = 1
        for dim in location.shape:
            count *= dim
        if count == 0:
            return torch.empty(location.shape, dtype=location.dtype)
        flat = torch.frombuffer(self._map, dtype=location.dtype, count=count, offset=location.start)
        return flat.view(location.shape)

    def release(self, location: _Location) -> None:
        """Drop the pages of ``location`` from this process's memory (re-read from the file if needed again): a
        checkpoint compared tensor by tensor then costs one tensor of resident memory, not the whole file."""
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        start = location.start - location.start % mmap.PAGESIZE
        length = location.end - start
        if length > 0:
            try:
                self._map.madvise(mmap.MADV_DONTNEED, start, min(length, len(self._map) - start))
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view handed out is still alive: the mapping goes with it
                pass
            self._map = None


class Checkpoint:
    """A checkpoint on disk, read one tensor at a time.

    Example::

        ckpt = Checkpoint.open("path/to/model")        # folder, .safetensors, index .json or .bin
        for key in ckpt.keys():
            value = ckpt.get(key)                        # mmap view; nothing else is read
    """

    def __init__(self, path: Path, files: list[Path], fmt: str):
        self.path = path
        self.files = files
        self.format = fmt
        self._safetensors: dict[Path, _SafetensorsFile] = {}
        self._locations: dict[str, _Location] = {}
        self._bin: dict[str, torch.Tensor] = {}
        if fmt == "safetensors":
            for file in files:
                reader = _SafetensorsFile(file)
                self._safetensors[file] = reader
                self._locations.update(reader.locations)
        else:
            for file in files:
                self._bin.update(_load_bin(file))

    @classmethod
    def open(cls, path: str | os.PathLike) -> Checkpoint:
        """Open a checkpoint file or a model folder; raises :class:`CheckpointError` with what is wrong."""
        path = Path(path)
        if not path.exists():
            raise CheckpointError(
                f"checkpoint path {path} does not exist",
                "pass the folder the model was loaded from, or checkpoint=False to skip the checkpoint checks",
            )
        if path.is_dir():
            for name, fmt in (
                (SAFETENSORS_INDEX, "safetensors"),
                (SAFETENSORS_SINGLE, "safetensors"),
                (BIN_INDEX, "bin"),
                (BIN_SINGLE, "bin"),
            ):
                if (path / name).is_file():
                    return cls.open(path / name) if name.endswith(".json") else cls(path, [path / name], fmt)
            raise CheckpointError(
                f"{path} holds no checkpoint ({SAFETENSORS_SINGLE}, {SAFETENSORS_INDEX}, {BIN_SINGLE} or {BIN_INDEX})",
                "pass the folder that holds the weights, or checkpoint=False to skip the checkpoint checks",
            )
        if path.name.endswith(".json"):
            return cls(path.parent, index_files(path), "safetensors" if ".safetensors" in path.name else "bin")
        if path.suffix == ".safetensors":
            return cls(path.parent, [path], "safetensors")
        if path.suffix in (".bin", ".pt", ".pth"):
            return cls(path.parent, [path], "bin")
        raise CheckpointError(
            f"{path} is not a checkpoint loadguard can read",
            "pass a .safetensors file, a .bin file, an index .json, or the model folder",
        )

    def keys(self) -> list[str]:
        return list(self._locations) if self.format == "safetensors" else list(self._bin)

    def __contains__(self, key: str) -> bool:
        return key in self._locations or key in self._bin

    def shape(self, key: str) -> tuple[int, ...]:
        return self._locations[key].shape if self.format == "safetensors" else tuple(self._bin[key].shape)

    def dtype(self, key: str) -> torch.dtype:
        return self._locations[key].dtype if self.format == "safetensors" else self._bin[key].dtype

    def get(self, key: str) -> torch.Tensor:
        """The tensor stored under ``key``: a zero-copy CPU view, valid while the checkpoint is open."""
        if self.format == "bin":
            return self._bin[key]
        location = self._locations[key]
        return self._safetensors[location.file].view(location)

    def release(self, key: str) -> None:
        """Give back the memory that reading ``key`` made resident (safetensors; a no-op otherwise)."""
        if self.format == "safetensors":
            location = self._locations[key]
            self._safetensors[location.file].release(location)

    def location(self, key: str) -> tuple[Path, int, int] | None:
        """(file, first byte, end byte) of ``key`` in a safetensors file; None for other formats."""
        if self.format != "safetensors":
            return None
        location = self._locations[key]
        return location.file, location.start, location.end

    def nbytes(self, key: str) -> int:
        if self.format == "safetensors":
            location = self._locations[key]
            return location.end - location.start
        tensor = self._bin[key]
        return tensor.numel() * tensor.element_size()

    def close(self) -> None:
        for reader in self._safetensors.values():
            reader.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, format={self.format!r}, files={len(self.files)})"


def _corrupt(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{named(path)} is corrupt: {what}", "download or save the checkpoint again")


def shard_names(index_path: Path) -> list[str]:
    """The shard file names an index names, each a plain file name beside it (never a path), in order, once each;
    :class:`CheckpointError` for an index that is not one or names anything else."""
    try:
        index = json.loads(index_path.read_text())
        weight_map = index["weight_map"]
        shards = list(dict.fromkeys(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(
            f"{index_path} is not a valid checkpoint index ({type(error).__name__}: {error})",
            "the index is corrupt: download or save the checkpoint again",
        ) from None
    outside = [
        shard
        for shard in shards
        if not isinstance(shard, str) or shard in ("", ".", "..") or Path(shard).name != shard
    ]
    if outside:
        raise CheckpointError(
            f"{index_path.name} names shard {outside[0]!r}, which is not a file name in {index_path.parent}: refused (an index only "
            "names files beside it)",
            "the index is corrupt or hostile: download or save the checkpoint again",
        )
    return shards


def index_files(index_path: Path) -> list[Path]:
    files = [index_path.parent / shard for shard in shard_names(index_path)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise CheckpointError(
            f"{index_path.name} names shard {missing[0]}, which is missing from {index_path.parent}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            "download the missing shard(s) again, or re-save the checkpoint",
        )
    return files


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:
        raise CheckpointError(
            f"{path} could not be read safely with torch.load(weights_only=True): {type(error).__name__}: {error}",
            "convert the checkpoint to safetensors, or audit without it (checkpoint=False)",
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(
            f"{path} does not hold a flat state dict of tensors", "save it with model.save_pretrained"
        )
    return state
