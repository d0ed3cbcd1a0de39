from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertModel

from loadguard._files.checkpoint import Checkpoint
from loadguard._files.keymap import map_keys
from loadguard.errors import CheckpointError

TENSORS = {
    "a.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    "b.bias": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
    "c.index": torch.arange(5),
    "d.mask": torch.tensor([True, False]),
}


def write_sharded(folder):
    save_file({"a.weight": TENSORS["a.weight"]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({k: v for k, v in TENSORS.items() if k != "a.weight"}, str(folder / "model-00002-of-00002.safetensors"))
    weight_map = {"a.weight": "model-00001-of-00002.safetensors"}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in TENSORS if k != "a.weight"})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.mark.parametrize("layout", ["single", "sharded", "bin"])
def test_reads_every_layout_exactly(tmp_path, layout):
    if layout == "single":
        save_file(TENSORS, str(tmp_path / "model.safetensors"))
    elif layout == "sharded":
        write_sharded(tmp_path)
    else:
        torch.save(TENSORS, tmp_path / "pytorch_model.bin")
    with Checkpoint.open(tmp_path) as ckpt:
        assert sorted(ckpt.keys()) == sorted(TENSORS)
        for key, value in TENSORS.items():
            got = ckpt.get(key)
            assert got.dtype == value.dtype and torch.equal(got, value), key
            assert ckpt.shape(key) == tuple(value.shape)


def test_safetensors_views_do_not_copy(tmp_path):
    save_file(TENSORS, str(tmp_path / "model.safetensors"))
    with Checkpoint.open(tmp_path / "model.safetensors") as ckpt:
        first, second = ckpt.get("a.weight"), ckpt.get("c.index")
        # both are views into one mapping of the file, not fresh allocations: their addresses are as
        # far apart as their bytes are in the file
        gap = ckpt._locations["c.index"].start - ckpt._locations["a.weight"].start
        assert second.data_ptr() - first.data_ptr() == gap


def test_missing_path_says_what_to_do(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist") as info:
        Checkpoint.open(tmp_path / "nope")
    assert "checkpoint=False" in info.value.hint


def test_folder_without_weights(tmp_path):
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        Checkpoint.open(tmp_path)


def test_truncated_safetensors(tmp_path):
    save_file(TENSORS, str(tmp_path / "model.safetensors"))
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match="truncated"):
        Checkpoint.open(tmp_path)


def test_corrupt_header(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        Checkpoint.open(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    with pytest.raises(CheckpointError, match="shorter than a safetensors header"):
        Checkpoint.open(tmp_path)


def test_index_naming_a_missing_shard(tmp_path):
    write_sharded(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="names shard model-00002-of-00002.safetensors, which is missing"):
        Checkpoint.open(tmp_path)


class NotATensor:
    pass


def test_bin_is_read_with_weights_only(tmp_path):
    torch.save({"a": NotATensor()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="weights_only=True"):
        Checkpoint.open(tmp_path)


def test_key_map_handles_prefix_and_legacy_names(tmp_path):
    torch.manual_seed(0)
    model = BertModel(
        BertConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    )
    renamed = {
        ("bert." + k)
        .replace("LayerNorm.weight", "LayerNorm.gamma")
        .replace("LayerNorm.bias", "LayerNorm.beta"): v.contiguous()
        for k, v in model.state_dict().items()
    }
    renamed["cls.predictions.bias"] = torch.zeros(50)
    save_file(renamed, str(tmp_path / "model.safetensors"))
    with Checkpoint.open(tmp_path) as ckpt:
        mapping = map_keys(model, ckpt, list(model.state_dict()))
    assert set(mapping.to_checkpoint) == set(model.state_dict())
    assert mapping.to_checkpoint["embeddings.LayerNorm.weight"] == "bert.embeddings.LayerNorm.gamma"
    assert mapping.unexpected == ("cls.predictions.bias",)
