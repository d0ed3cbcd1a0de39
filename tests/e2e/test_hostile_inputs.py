"""Hostile and unlucky checkpoint inputs (issue 29): each gives one clear line and exit 2, in bounded memory and time,
and changes no file; a checkpoint its readers would reject is never 'clean'."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadguard._files.checkpoint import Checkpoint
from loadguard._files.headers import bin_header
from loadguard.errors import CheckpointError


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _scan(folder, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loadguard", "scan", str(folder), "--trust-remote-code", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


# ----------------------------------------------------------------------------------------------------
# safetensors headers


def _safetensors(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _entry(offsets, shape=(2,), dtype="F32"):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


CORRUPT = {
    "overlapping offsets": ({"a": _entry((0, 8)), "b": _entry((4, 12))}, bytes(12), "overlaps"),
    "a gap between tensors": ({"a": _entry((0, 8)), "b": _entry((12, 20))}, bytes(20), "leaves a gap"),
    "bytes unlike shape x dtype": ({"a": _entry((0, 12), shape=(2,))}, bytes(12), "takes 8"),
    "data past the last tensor": ({"a": _entry((0, 8))}, bytes(16), "the tensors end at byte"),
    "negative offset": ({"a": _entry((-8, 0))}, bytes(8), "malformed"),
    "float shape": ({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, bytes(8), "malformed"),
    "metadata of numbers": ({"__metadata__": {"format": 1}, "a": _entry((0, 8))}, bytes(8), "__metadata__"),
    "a header that is a list": ([1, 2], b"", "not a JSON object"),
}


@pytest.mark.parametrize("case", CORRUPT)
def test_a_header_its_readers_reject_is_refused_saying_what_is_wrong(case, tmp_path):
    header, data, why = CORRUPT[case]
    path = tmp_path / "model.safetensors"
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    with pytest.raises(CheckpointError, match="corrupt") as info:
        Checkpoint.open(path)
    assert why in info.value.message


def test_a_corrupt_header_in_a_model_folder_is_never_clean(zoo_folder, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(zoo_folder("clean"), folder)
    checkpoint = folder / "model.safetensors"
    raw = checkpoint.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    first, second = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])[:2]
    header[second]["data_offsets"][0] -= 4  # overlaps its neighbour, same length claim broken too
    encoded = json.dumps(header).encode()
    checkpoint.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])
    before = _tree(folder)
    result = _scan(folder)
    assert result.returncode == 2 and "is corrupt" in result.stderr and "Hint:" in result.stderr, result.stderr[-1500:]
    assert _tree(folder) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=st.lists(
        st.tuples(
            st.integers(-4, 64),
            st.integers(-4, 64),
            st.lists(st.integers(0, 4), max_size=3),
            st.sampled_from(["F32", "F16", "I64", "BOOL", "X9"]),
        ),
        max_size=4,
    ),
    extra=st.integers(0, 16),
)
def test_any_header_is_valid_or_one_checkpoint_error(entries, extra, tmp_path):
    header = {
        f"t{i}": {"dtype": d, "shape": shape, "data_offsets": [b, e]} for i, (b, e, shape, d) in enumerate(entries)
    }
    path = tmp_path / "model.safetensors"
    raw = json.dumps(header).encode()
    ends = [max(b, e) for b, e, _, _ in entries] or [0]
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(max(0, max(ends)) + extra))
    try:
        checkpoint = Checkpoint.open(path)
    except CheckpointError as error:
        assert error.message and error.hint
        return
    # accepted: then it is what safetensors itself reads, tensor for tensor
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        for key in checkpoint.keys():
            assert tuple(handle.get_slice(key).get_shape()) == checkpoint.shape(key)
    checkpoint.close()


# ----------------------------------------------------------------------------------------------------
# shard indexes


@pytest.mark.parametrize(
    "shard", ["../elsewhere/model-00001.safetensors", "/etc/hostname", "sub/model.safetensors", ".."]
)
def test_an_index_naming_a_file_outside_its_folder_is_refused_before_reading_it(zoo_folder, tmp_path, shard):
    folder = tmp_path / "m"
    shutil.copytree(zoo_folder("clean"), folder)
    keys = list(Checkpoint.open(folder).keys())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {key: shard for key in keys}})
    )
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="which is not a file name in") as info:
        Checkpoint.open(folder)
    assert "hostname" not in info.value.message or shard == "/etc/hostname"  # names the entry, never leaks file bytes
    result = _scan(folder)
    assert result.returncode == 2 and "not a file name" in result.stderr


# ----------------------------------------------------------------------------------------------------
# .bin checkpoints: metadata without data


def test_bin_shapes_are_read_without_loading_and_equal_torch_load(tmp_path):
    state = {
        "a": torch.zeros(2, 3),
        "b": torch.ones(4, dtype=torch.bfloat16),
        "c": torch.arange(5),
        "view": torch.zeros(4, 4)[1:, :2],
    }
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert bin_header(tmp_path / "pytorch_model.bin") == {k: (tuple(v.shape), v.dtype) for k, v in state.items()}


def _hostile_bin(path: Path, numel_claimed: int, shape: tuple[int, ...], storage_bytes: int) -> None:
    """A torch zip whose pickle claims a tensor far larger than the bytes it ships."""

    class Storage:
        def __reduce__(self):
            return (_id, ())

    buffer = io.BytesIO()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                return ("storage", _FloatStorage, "0", "cpu", numel_claimed)
            return None

    rebuild = _Global("torch._utils", "_rebuild_tensor_v2")
    Pickler(buffer, protocol=2).dump(
        {
            "huge": _Reduce(
                rebuild,
                (
                    Storage(),
                    0,
                    shape,
                    tuple(1 for _ in shape),
                    False,
                    _Reduce(_Global("collections", "OrderedDict"), ()),
                ),
            )
        }
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/data/0", bytes(storage_bytes))
        archive.writestr("archive/version", "3\n")


class _Global:
    def __init__(self, module, name):
        self.module, self.name = module, name

    def __reduce__(self):
        return (_import, (self.module, self.name))


class _Reduce:
    def __init__(self, callable_, args):
        self.callable_, self.args = callable_, args

    def __reduce__(self):
        return (_apply, (self.callable_, self.args))


def _import(module, name):  # pragma: no cover - only named in the pickle, never called here
    raise AssertionError


def _apply(callable_, args):  # pragma: no cover
    raise AssertionError


def _id():  # pragma: no cover
    raise AssertionError


_FloatStorage = _Global("torch", "FloatStorage")


def test_a_bin_claiming_more_than_it_holds_is_refused_in_bounded_memory(zoo_folder, tmp_path):
    """A 4 MB .bin whose pickle claims an 8 GiB tensor: the scan reads its pickle only, refuses it as corrupt, and its
    process stays far under 500 MB above what importing torch and transformers costs."""
    folder = tmp_path / "m"
    shutil.copytree(zoo_folder("clean"), folder)
    (folder / "model.safetensors").unlink()
    _hostile_bin(folder / "pytorch_model.bin", numel_claimed=2**31, shape=(2**31,), storage_bytes=4 * 2**20)
    with pytest.raises(CheckpointError, match="reaches past its storage|not a plain state dict"):
        bin_header(folder / "pytorch_model.bin")
    probe = (
        "import resource, sys, torch, transformers; from loadguard.cli import main\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n    main(['scan', sys.argv[1], '--trust-remote-code', '--memory-limit', 'none'])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print('RESULT', code, base, children)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe, str(folder)], capture_output=True, text=True, timeout=300)
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT"))
    _, code, base, children = line.split()
    assert code == "2" and (
        "reaches past its storage" in result.stderr or "not a plain state dict" in result.stderr
    ), result.stderr[-1500:]
    assert int(children) < int(base) + 500 * 1024, (base, children)  # kB: the scan's child added under 500 MB


@pytest.mark.parametrize("command", [["scan", "--trust-remote-code"], ["selfcheck"]])
def test_a_cache_that_is_a_file_is_one_line_not_an_unexpected_error(zoo_folder, tmp_path, command):
    cache = tmp_path / "cache-is-a-file"
    cache.write_text("not a folder")
    arguments = [sys.executable, "-m", "loadguard", *command] + (
        [str(zoo_folder("clean"))] if command[0] == "scan" else []
    )
    result = subprocess.run(
        arguments,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "LOADGUARD_CACHE": str(cache)},
    )
    assert result.returncode == 2, result.stderr[-1500:]
    assert "is not a writable folder" in result.stderr and "unexpected" not in result.stderr
    assert "Hint: set LOADGUARD_CACHE to a writable folder" in result.stderr
    assert cache.read_text() == "not a folder"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    index=st.one_of(
        st.dictionaries(
            st.text(max_size=8),
            st.one_of(st.text(max_size=12), st.integers(), st.none(), st.lists(st.text(max_size=4), max_size=2)),
            max_size=4,
        ).map(lambda m: {"weight_map": m}),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6)),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
            max_leaves=8,
        ),
    )
)
def test_any_index_is_a_checkpoint_or_one_checkpoint_error_and_reads_nothing_outside(index, tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    folder = root / "model"
    folder.mkdir()
    (root / "secret.safetensors").write_bytes(b"outside the model folder")
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    before = _tree(root)
    try:
        checkpoint = Checkpoint.open(folder)
    except CheckpointError as error:
        assert error.message and error.hint and "outside the model folder" not in error.message
    else:
        assert all(file.parent == folder for file in checkpoint.files)
        checkpoint.close()
    assert _tree(root) == before
