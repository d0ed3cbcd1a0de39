"""loadguard scan --native: transformers' own classes, weightless, from their default configs (issue 18)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers

import loadguard
from loadguard._audit.checks import CONSTANT_FILL_NOTE
from loadguard._scan import native

from ..conftest import IS_V5

WIDTHS = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 96,
    "max_position_embeddings": 64,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "d_model": 32,
    "d_ff": 64,
    "n_embd": 32,
    "n_head": 4,
    "n_positions": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
}


def tiny(config) -> None:
    """Narrow as well as shallow (in place, sub-configs too): small enough to save and load in a test."""
    native.shrink(config)
    seen: set[int] = set()

    def narrow(target) -> None:
        if id(target) in seen:
            return
        seen.add(id(target))
        for name, value in WIDTHS.items():
            if isinstance(vars(target).get(name), int) and not isinstance(vars(target).get(name), bool):
                setattr(target, name, value)
        for value in list(vars(target).values()):
            if hasattr(value, "to_dict") and hasattr(value, "model_type") and not isinstance(value, type):
                narrow(value)

    narrow(config)


def failing(report) -> dict[str, str]:
    return {f.tensor: f.status for f in report.failures}


def test_classes_and_shrink():
    everything = native.classes()
    causal = native.classes(tasks="*CAUSAL_LM*")
    assert len(everything) > 1000 and 100 < len(causal) < len(everything)
    assert all(
        c.class_name.endswith(("ForCausalLM", "LMHeadModel", "Model", "ForConditionalGeneration")) or c.class_name
        for c in causal
    )
    assert not any(c.class_name.endswith("Config") for c in everything)
    config = transformers.LlamaConfig(num_hidden_layers=32)
    assert native.shrink(config) == ["num_hidden_layers 32->2"] and config.num_hidden_layers == 2
    mixtral = transformers.MixtralConfig(num_hidden_layers=8, num_local_experts=8, num_experts_per_tok=2)
    assert set(native.shrink(mixtral)) == {"num_hidden_layers 8->2", "num_local_experts 8->4"}


@pytest.mark.skipif(
    not hasattr(transformers, "ZayaForCausalLM"), reason=f"transformers {transformers.__version__} has no Zaya"
)
def test_zayas_unguarded_write_is_found_in_tree(capsys):
    """The in-tree defect: Zaya's _init_weights sets balancing_biases[-1] = -1.0 unguarded, so a checkpoint's last
    balancing bias is replaced on every load; the report names the line that wrote it."""
    from loadguard.cli import main

    with pytest.raises(SystemExit) as info:
        main(["scan", "--native", "--match", "ZayaForCausalLM", "--format", "json"])
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    written = {f["tensor"]: f["detail"] for f in row["findings"] if f["status"] == "overwritten"}
    assert info.value.code == 1 and row["model"] == "ZayaForCausalLM (zaya)"
    assert set(written) == {f"model.layers.{i}.mlp.gate.balancing_biases" for i in range(2)}
    assert all("__setitem__" in d and "modeling_zaya.py:" in d and "(_init_weights)]" in d for d in written.values())
    with pytest.raises(SystemExit):
        main(["scan", "--native", "--match", "ZayaForCausalLM", "--format", "markdown"])
    report = capsys.readouterr().out
    assert (
        report.startswith("| class | tensor | status | what happens |")
        and "`model.layers.0.mlp.gate.balancing_biases`" in report
    )


@pytest.mark.skipif(not IS_V5, reason="the differential runs on the pinned 5.x")
def test_the_native_scan_equals_a_full_audit_on_sampled_classes(tmp_path):
    """For 30+ classes sampled across the auto mappings (every class's verdict is the scan's; these are proven)."""
    _differential(tmp_path, wanted=32, stride=None)


def _differential(tmp_path, wanted: int, stride: int | None) -> None:
    """Classes sampled across the auto mappings: made tiny, saved, loaded in full under poison and audited, the
    verdict equals the scan's of the same config."""
    natives = native.classes()
    agreed, tried = [], 0
    for candidate in natives[:: stride or max(1, len(natives) // 90)]:
        if len(agreed) >= wanted:
            break
        try:
            config = transformers.AutoConfig.for_model(candidate.model_type)
            tiny(config)
            cls = getattr(transformers, candidate.class_name)
            torch.manual_seed(0)
            model = cls(copy.deepcopy(config))
            folder = tmp_path / candidate.class_name
            model.save_pretrained(folder)
            with torch.device("meta"):  # the tiny config survives its own round trip, shapes and all
                again = cls(transformers.AutoConfig.from_pretrained(folder))
            shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
            if shapes != {k: tuple(v.shape) for k, v in again.state_dict().items()}:
                continue
        except Exception:
            continue  # its default config does not shrink this way: not a sample
        outcomes = []
        for attempt in (
            lambda: loadguard.scan(copy.deepcopy(config), model_class=cls, keys="complete"),
            lambda: loadguard.load(cls, folder, poison=True, on_problem="warn"),
        ):
            try:
                outcomes.append(attempt())
            except loadguard.LoadguardError as error:
                outcomes.append(error)
        errors = [o for o in outcomes if isinstance(o, Exception)]
        if len(errors) == 2:
            continue  # transformers refuses this tiny config for a load as for a scan: not a sample
        assert not errors, (candidate.label, errors)
        tried += 1
        predicted, loaded = outcomes
        audited = failing(loaded.loadguard_report_as_loaded)
        # a constant fill (zero_ of a padding row) onto what the checkpoint already holds is invisible to an audit
        expected = {
            f.tensor: f.status
            for f in predicted.failures
            if not (CONSTANT_FILL_NOTE in f.detail and f.tensor not in audited)
        }
        assert expected == audited, candidate.label
        agreed.append(candidate.label)
    assert len(agreed) >= wanted - (2 if wanted > 10 else 0), (len(agreed), tried)


def test_match_takes_globs_and_substrings_as_users_type_them():
    from loadguard._scan.native import classes, matches

    assert matches("LlamaForCausalLM", "ForCausalLM") and matches("LlamaForCausalLM", "*ForCausalLM")
    assert not matches("LlamaModel", "ForCausalLM") and not matches("LlamaForCausalLM", "ForCausalLM*")
    causal = {c.class_name for c in classes("ForCausalLM")}
    assert (
        causal == {c.class_name for c in classes("*ForCausalLM*")}
        and "LlamaForCausalLM" in causal
        and len(causal) > 100
    )


def test_env_names_the_torch_build(capsys):
    import torch

    from loadguard.cli import main

    with pytest.raises(SystemExit):
        main(["env"])
    out = capsys.readouterr().out
    build = "CUDA " + torch.version.cuda if torch.version.cuda else "CPU"
    assert f"- torch build: {torch.__version__} ({build})" in out
