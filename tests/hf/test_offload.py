"""Offloaded and quantized loads: what accelerate's hooks will load is verified as they will load it, repaired where
they read it; quantized weights are reported unverifiable, never as false findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import accelerate
import pytest
import torch

import loadguard
from loadguard import zoo
from loadguard._audit.loading import load_unaudited

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")
TOKENS = torch.tensor([[10, 11, 12, 13]])


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("llama")
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    ).save_pretrained(folder)
    return folder


LLAMA_DISK = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}


def test_disk_offloaded_native_model_is_verified_not_waved_through(llama_folder, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        llama_folder, device_map=LLAMA_DISK, offload_folder=tmp_path / "offload"
    )
    assert model.model.layers[1].mlp.up_proj.weight.device.type == "meta"
    report = loadguard.audit(model)
    assert report.ok and report.findings == ()  # before: every offloaded weight "unverifiable"
    fidelity = report.summary("checkpoint_fidelity")
    assert (
        fidelity.checked == len(model.state_dict())
        and "9 offloaded by accelerate, verified as its hooks load them" in fidelity.reason
    )


def test_cpu_offloaded_native_model_is_verified(llama_folder):
    from transformers import AutoModelForCausalLM

    model = accelerate.cpu_offload(AutoModelForCausalLM.from_pretrained(llama_folder), execution_device="cpu")
    report = loadguard.audit(model, llama_folder)
    assert (
        report.ok
        and report.findings == ()
        and "offloaded by accelerate" in report.summary("checkpoint_fidelity").reason
    )


@needs_v5
@pytest.mark.parametrize("where", ["cpu", "disk"])
def test_an_overwritten_weight_inside_an_offloaded_module(zoo_folder, tmp_path, where):
    """The weights were overwritten before accelerate offloaded them: the hook would load the wrong value."""
    model, _ = load_unaudited(None, zoo_folder("overwritten"), poison=True, trust_remote_code=True)
    if where == "cpu":
        model = accelerate.cpu_offload(model, execution_device="cpu")
    else:
        model = accelerate.disk_offload(model, tmp_path / "offload", execution_device="cpu")
    before = {p.name: p.read_bytes() for p in (tmp_path / "offload").iterdir()} if where == "disk" else {}
    report = loadguard.audit(model, zoo_folder("overwritten"))
    (finding,) = report.failures
    assert (finding.tensor, finding.status, finding.device) == (
        "lm_head.weight",
        "overwritten",
        f"offloaded ({where})",
    )
    assert f"as accelerate's hook loads it from {where}" in finding.detail
    result = loadguard.repair(model, report)
    assert result.ok and result.repaired == ("lm_head.weight",)
    with torch.no_grad():
        assert torch.equal(model(TOKENS).logits, zoo.build_model("overwritten")(TOKENS).logits)
    if where == "disk":  # repaired in memory: the offload folder is never written
        assert {p.name: p.read_bytes() for p in (tmp_path / "offload").iterdir()} == before


@needs_v5
def test_transformers_does_not_overwrite_what_it_offloads(zoo_folder, tmp_path):
    """The same model with its head offloaded by from_pretrained: the hook loads the checkpoint's own bytes (init
    wrote only into the meta placeholder), and the audit says so instead of guessing."""
    layout = {"embed_tokens": "cpu", "positions": "cpu", "layers": "cpu", "norm": "cpu", "lm_head": "disk"}
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("overwritten"),
        trust_remote_code=True,
        poison=True,
        device_map=layout,
        offload_folder=tmp_path / "offload",
    )
    assert model.loadguard_report.ok and model.lm_head.weight.device.type == "meta"


@needs_v5
def test_garbage_buffers_in_offloaded_modules_are_found_and_repaired(zoo_folder, tmp_path):
    layout = {
        "embed_tokens": "cpu",
        "positions": "disk",
        "layers.0": "cpu",
        "layers.1": "disk",
        "norm": "cpu",
        "lm_head": "cpu",
    }
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("np_buffer"),
        trust_remote_code=True,
        poison=True,
        device_map=layout,
        offload_folder=tmp_path / "offload",
    )
    assert model.layers[1].attn.q_proj.weight.device.type == "meta"  # the module is offloaded; its buffers stay on it
    assert {f.tensor: f.status for f in model.loadguard_report_as_loaded.failures} == {
        f.tensor: f.status for f in zoo.get("np_buffer").expected_for(2)
    }
    assert model.loadguard_repair.ok and model.loadguard_report.ok
    with torch.no_grad():
        assert torch.equal(model(TOKENS).logits, zoo.build_model("np_buffer")(TOKENS).logits)


@needs_v5
def test_offloaded_vlm_repaired_generates_like_the_fixed_variant(zoo_folder, tmp_path):
    """(accelerate cannot offload the resampler itself: nn.MultiheadAttention reads its out_proj weight without
    calling it, so that hook never runs. The language model's layer can be.)"""
    from transformers import AutoProcessor

    from loadguard.runner import HfRunner, default_cases

    layout = {
        "llm.model.embed_tokens": "cpu",
        "llm.model.layers.0": "cpu",
        "llm.model.layers.1": "disk",
        "llm.model.norm": "cpu",
        "llm.model.rotary_emb": "cpu",
        "llm.lm_head": "cpu",
        "vpm": "cpu",
        "resampler": "cpu",
    }
    folder = zoo_folder("minicpmv_like")
    model = loadguard.load(
        "AutoModelForCausalLM",
        folder,
        trust_remote_code=True,
        poison=True,
        workarounds="auto",
        device_map=layout,
        offload_folder=tmp_path / "offload",
    )
    assert [f.tensor for f in model.loadguard_report_as_loaded.failures] == [
        "resampler.pos_embed"
    ] and model.loadguard_repair.ok
    assert "offloaded by accelerate" in model.loadguard_report_as_loaded.summary("checkpoint_fidelity").reason
    prompts, images = default_cases(folder)
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    repaired = HfRunner.from_model(model, processor).generate_greedy(prompts, 8, images=images)
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds="auto") as fixed:
        assert repaired == fixed.generate_greedy(prompts, 8, images=images)


def test_loading_options_on_the_command_line(zoo_folder, tmp_path, capsys):
    from loadguard.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as info:
            main(list(args))
        captured = capsys.readouterr()
        return (
            info.value.code,
            captured.out,
            [line for line in captured.err.splitlines() if line.startswith(("Error:", "Hint:"))],
        )

    folder = str(zoo_folder("np_buffer"))
    code, out, _ = run(
        "audit",
        folder,
        "--trust-remote-code",
        "--format",
        "json",
        "--offload-folder",
        str(tmp_path / "o"),
        "--device-map",
        json.dumps(
            {
                "embed_tokens": "cpu",
                "positions": "cpu",
                "layers.0": "cpu",
                "layers.1": "disk",
                "norm": "cpu",
                "lm_head": "cpu",
            }
        ),
    )
    document = json.loads(out)
    assert code == (1 if IS_V5 else 0)
    assert (
        "offloaded by accelerate"
        in next(c for c in document["checks"] if c["check"] == "checkpoint_fidelity")["reason"]
    )
    if IS_V5:
        code, _, lines = run(
            "audit",
            folder,
            "--trust-remote-code",
            "--device-map",
            json.dumps({"": "cpu", "layers.1": "disk"}),
            "--offload-folder",
            str(tmp_path / "p"),
        )
        assert code == 2 and len(lines) == 2
        assert (
            lines[0].startswith(f"Error: transformers {TRANSFORMERS_VERSION} cannot load")
            and "((root): cpu, layers.1: disk)" in lines[0]
        )
        assert "no '' entry next to per-module entries" in lines[1]
    code, _, lines = run("audit", folder, "--trust-remote-code", "--device-map", "{not json")
    assert code == 2 and "is not valid JSON" in lines[0]
    code, _, lines = run("audit", folder, "--trust-remote-code", "--max-memory", "lots")
    assert code == 2 and "is not DEVICE=SIZE" in lines[0]
    code, _, lines = run("scan", folder, "--trust-remote-code", "--device-map", json.dumps({"layers.1": "disk"}))
    assert code == 2 and "offloading) is not simulated" in lines[0] and "loadguard audit" in lines[1]


QUANTIZED = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch, transformers
transformers.logging.set_verbosity_error()
from transformers import AutoModelForCausalLM, TorchAoConfig
from torchao.quantization import Int8WeightOnlyConfig
import loadguard
out = {}
for name, path in json.loads(sys.argv[1]).items():
    with loadguard.poison():
        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, device_map="cpu",
                                                     quantization_config=TorchAoConfig(quant_type=Int8WeightOnlyConfig()))
    report = loadguard.audit(model)
    out[name] = {"failures": sorted(f.tensor for f in report.failures),
                 "quantized": sorted(f.tensor for f in report.findings if "quantized on load" in f.detail),
                 "forward": report.ok and bool(torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all())}
print(json.dumps(out))
"""


def test_a_quantized_load_reports_no_false_finding(llama_folder, zoo_folder):
    """torchao int8 weight-only (transformers' CPU quantization): quantized weights are unverifiable with the
    reason, non-persistent buffers are still checked."""
    site = Path(sys.prefix) / "quantization"
    if not (site / "torchao").is_dir():
        pytest.skip(f"torchao is not installed in {site} (make test installs it there)")
    models = {"llama": str(llama_folder), "np_buffer": str(zoo_folder("np_buffer"))}
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", QUANTIZED, json.dumps(models)], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["llama"]["failures"] == [] and out["llama"]["forward"]
    assert len(out["llama"]["quantized"]) == 14  # every linear weight of the 2 layers (q, k, v, o, gate, up, down)
    expected = {f.tensor for f in zoo.get("np_buffer").expected_for(2)} if IS_V5 else set()
    assert set(out["np_buffer"]["failures"]) == expected  # the buffers' real failure, nothing else


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine (run on a GPU machine to cover it)"
)


@needs_cuda
@needs_v5
@pytest.mark.parametrize("layout", ["cuda", "split"])
def test_audit_and_repair_where_each_tensor_lives(zoo_folder, layout):
    """On a GPU, or split between GPU and CPU: the reference is built on CPU, every comparison is made on the
    tensor's own device (one tensor at a time), repair writes there."""
    device_map = (
        "cuda"
        if layout == "cuda"
        else {
            "embed_tokens": "cuda:0",
            "positions": "cuda:0",
            "layers.0": "cuda:0",
            "layers.1": "cpu",
            "norm": "cpu",
            "lm_head": "cpu",
        }
    )
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("np_buffer"),
        trust_remote_code=True,
        poison=True,
        device_map=device_map,
        on_problem="warn",
    )
    report = model.loadguard_report
    assert {f.tensor: f.status for f in report.failures} == {
        f.tensor: f.status for f in zoo.get("np_buffer").expected_for(2)
    }
    assert report.failures[0].device.startswith(("cuda", "cpu"))
    result = loadguard.repair(model, report)
    assert result.ok and model.positions.table.device.type == "cuda"
    with torch.no_grad():
        got = model(TOKENS.to("cuda")).logits.cpu()
    assert torch.allclose(got, zoo.build_model("np_buffer")(TOKENS).logits, atol=1e-4)
