"""Proof (c) for any size: without weights, a model over the synthetic limit is built on both releases from a shrunk
copy of its config (fewer layers, fewer heads, every width scaled with them), and the proof says what was shrunk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import loadguard
from loadguard._hf import MAX_SYNTHETIC, shrunk

from ..conftest import IS_V5, TRANSFORMERS_VERSION

v5_only = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads the zoo right")


def test_a_grouped_query_config_keeps_its_head_width_and_groups_that_divide():
    qwen2_72b = {
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 80,
        "layer_types": ["full_attention"] * 80,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "use_sliding_window": False,
    }
    small, said = shrunk(qwen2_72b)
    assert small == {
        **qwen2_72b,
        "hidden_size": 512,
        "intermediate_size": 1848,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "layer_types": ["full_attention"] * 2,
    }
    assert small["hidden_size"] // small["num_attention_heads"] == 8192 // 64  # each head as wide as it was
    assert said == [
        "num_hidden_layers 80->2",
        "layer_types cut to its first 2",
        "num_attention_heads 64->4",
        "num_key_value_heads 8->2",
        "hidden_size 8192->512",
        "intermediate_size 29568->1848",
    ]
    assert qwen2_72b["num_hidden_layers"] == 80  # the document handed in is not changed


def test_experts_sub_configs_and_what_is_already_small():
    deepseek_v3 = {
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "qk_rope_head_dim": 64,
        "kv_lora_rank": 512,
        "num_hidden_layers": 61,
        "text_config": {"hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24},
        "quantization_config": {"num_hidden_layers": 61},
    }
    small, said = shrunk(deepseek_v3)
    assert (small["hidden_size"], small["num_attention_heads"], small["num_key_value_heads"]) == (224, 4, 4)
    assert (small["moe_intermediate_size"], small["n_routed_experts"], small["num_experts_per_tok"]) == (64, 4, 2)
    assert (small["n_group"], small["topk_group"], small["num_hidden_layers"]) == (1, 1, 2)
    assert (small["qk_rope_head_dim"], small["kv_lora_rank"]) == (64, 512)  # not a width scaled with the heads
    assert small["text_config"] == {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2}
    assert small["quantization_config"] == {"num_hidden_layers": 61}  # not a model's config
    assert "text_config.num_hidden_layers 24->2" in said
    tiny = {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2, "vocab_size": 64}
    assert shrunk(tiny) == (tiny, [])
    odd = {"hidden_size": 100, "intermediate_size": 300, "num_attention_heads": 12}  # 100 * 4 / 12: not whole
    assert shrunk(odd) == (odd, [])


@pytest.fixture
def compat(compat_cache, monkeypatch):
    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))


@v5_only
def test_a_model_over_the_limit_gets_proof_c_on_a_shrunk_copy_of_its_config(zoo_folder, compat, tmp_path):
    bare = tmp_path / "big_np_buffer"
    shutil.copytree(zoo_folder("np_buffer"), bare, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((bare / "config.json").read_text())
    config.update(hidden_size=4096, num_attention_heads=32, intermediate_size=16384, num_hidden_layers=4)
    (bare / "config.json").write_text(json.dumps(config, indent=2))
    before = {p.name: p.read_bytes() for p in bare.iterdir()}
    result = loadguard.fix(bare, tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.weightless) == ("fixed", True), result.to_json()
    proof = result.proof("same_outputs")
    assert proof.ok is True, proof.detail
    assert "both built from a shrunk copy of its config (" in proof.detail
    assert (
        "num_hidden_layers 4->2, num_attention_heads 32->4, hidden_size 4096->512, intermediate_size 16384->2048"
        in proof.detail
    )
    counted = int(proof.detail.split("shrunk copy of its config (")[1].split(" parameters;")[0].replace(",", ""))
    assert counted > MAX_SYNTHETIC  # it was over the limit: before, (c) was 'not run' for it
    assert proof.measured["tokens_patched"] == proof.measured["tokens_original"]
    assert "built from a shrunk copy of its config" in result.proof("saves_and_reloads").detail
    assert {p.name: p.read_bytes() for p in Path(bare).iterdir()} == before
