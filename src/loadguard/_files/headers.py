"""Keys, shapes and dtypes of a ``.bin`` (torch zip) checkpoint without loading a byte of its data.

The zip's ``data.pkl`` is read with a restricted unpickler: only the names a state dict of tensors needs resolve
(``torch._utils._rebuild_tensor_v2/_v3``, ``_rebuild_parameter``, ``collections.OrderedDict``, torch's storage classes
and dtypes), storages are recorded from their persistent ids and never materialised, and every tensor's claimed
extent is checked against the size of its storage entry in the zip. Memory is bounded by the size of ``data.pkl``
(at most :data:`MAX_PICKLE_BYTES`), whatever the pickle claims.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path

import torch

from ..errors import CheckpointError

MAX_PICKLE_BYTES = 256 * 2**20

_STORAGE_DTYPES = {
    name: getattr(torch, dtype)
    for name, dtype in {
        "FloatStorage": "float32",
        "DoubleStorage": "float64",
        "HalfStorage": "float16",
        "BFloat16Storage": "bfloat16",
        "LongStorage": "int64",
        "IntStorage": "int32",
        "ShortStorage": "int16",
        "CharStorage": "int8",
        "ByteStorage": "uint8",
        "BoolStorage": "bool",
        "ComplexFloatStorage": "complex64",
        "ComplexDoubleStorage": "complex128",
    }.items()
}


class _Storage:
    def __init__(self, key: str, dtype: torch.dtype | None, numel: int):
        self.key, self.dtype, self.numel = key, dtype, numel


class _Meta:
    """What a tensor record says: its shape and dtype, and the extent of storage it claims."""

    def __init__(self, storage: _Storage, offset: int, shape, stride, dtype: torch.dtype | None = None):
        self.storage = storage
        self.dtype = dtype or storage.dtype
        self.shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self.shape) or offset < 0:
            raise ValueError("a negative size or offset")
        extent = 1 + sum((d - 1) * int(s) for d, s in zip(self.shape, stride)) if all(self.shape) else 0
        self.end = int(offset) + extent  # elements of the storage it reaches


def _rebuild_v2(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    return _Meta(storage, offset, size, stride)


def _rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
    return _Meta(storage, offset, size, stride, dtype)


def _rebuild_parameter(data, requires_grad, hooks, state=None):
    return data


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_v2
        if (module, name) == ("torch._utils", "_rebuild_tensor_v3"):
            return _rebuild_v3
        if (module, name) in (
            ("torch._utils", "_rebuild_parameter"),
            ("torch._utils", "_rebuild_parameter_with_state"),
        ):
            return _rebuild_parameter
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return name
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) == ("torch", "UntypedStorage") or (module, name) == ("torch.storage", "UntypedStorage"):
            return name
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a state dict of tensors")

    def persistent_load(self, saved_id):
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5 and saved_id[0] == "storage"):
            raise pickle.UnpicklingError("a persistent id that is not a tensor storage")
        _, storage_type, key, _location, numel = saved_id
        return _Storage(
            str(key), _STORAGE_DTYPES.get(storage_type) if isinstance(storage_type, str) else None, int(numel)
        )


def bin_header(path: Path) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """``{key: (shape, dtype)}`` of the torch zip checkpoint ``path``; :class:`CheckpointError` saying what is wrong
    (not a zip, a legacy pickle, names outside a state dict, a tensor reaching past its storage)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [
                info
                for info in archive.infolist()
                if info.filename.endswith("/data.pkl") or info.filename == "data.pkl"
            ]
            if len(pickles) != 1:
                raise ValueError("no single data.pkl in the archive")
            if pickles[0].file_size > MAX_PICKLE_BYTES:
                raise ValueError(
                    f"its data.pkl claims {pickles[0].file_size} bytes (at most {MAX_PICKLE_BYTES} are read)"
                )
            prefix = pickles[0].filename[: -len("data.pkl")]
            sizes = {
                info.filename[len(prefix) + len("data/") :]: info.file_size
                for info in archive.infolist()
                if info.filename.startswith(prefix + "data/")
            }
            with archive.open(pickles[0]) as handle:
                state = _Unpickler(handle).load()
    except zipfile.BadZipFile:
        raise CheckpointError(
            f"{path} is not a torch zip checkpoint (the legacy pickle format, or a corrupt file): its shapes cannot be read without loading it",
            "convert the checkpoint to safetensors (or re-save it with a current torch), or audit a full load",
        ) from None
    except (
        pickle.UnpicklingError,
        ValueError,
        TypeError,
        EOFError,
        AttributeError,
        KeyError,
        IndexError,
        OSError,
    ) as error:
        raise CheckpointError(
            f"{path} is not a plain state dict of tensors ({error})",
            "convert the checkpoint to safetensors, or save it with model.save_pretrained",
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, _Meta) for v in state.values()):
        raise CheckpointError(
            f"{path} does not hold a flat state dict of tensors", "save it with model.save_pretrained"
        )
    out = {}
    for key, meta in state.items():
        size = sizes.get(meta.storage.key)
        itemsize = torch.empty((), dtype=meta.dtype).element_size() if meta.dtype is not None else 1
        if meta.dtype is None or size is None or meta.end > size // itemsize or meta.end > meta.storage.numel:
            raise CheckpointError(
                f"{path} is corrupt: tensor {key!r} reaches past its storage", "download or save the checkpoint again"
            )
        out[str(key)] = (meta.shape, meta.dtype)
    return out


__all__ = ["MAX_PICKLE_BYTES", "bin_header"]
