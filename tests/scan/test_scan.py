"""scan(): the prediction without weights equals the full-load audit, on every zoo entry and on native models."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers

import loadguard
from loadguard import zoo
from loadguard.errors import ModelNotFoundError, ScanError

from ..conftest import IS_V5, TRANSFORMERS_VERSION

ZOO = [e.name for e in zoo.entries()]


def _natives():
    """Tiny native models, one per family the issue names: causal LM, encoder, encoder-decoder, vision, VLM, MoE."""
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        BertConfig,
        BertModel,
        CLIPConfig,
        CLIPModel,
        CLIPVisionConfig,
        GemmaConfig,
        GemmaForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        LlavaConfig,
        LlavaForConditionalGeneration,
        MixtralConfig,
        MixtralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        T5Config,
        T5ForConditionalGeneration,
        ViTConfig,
        ViTModel,
    )

    decoder = dict(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8
    )
    text = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    seq2seq = dict(
        vocab_size=100,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
    )
    torch.manual_seed(0)
    models = {
        "llama": (lambda: LlamaForCausalLM(LlamaConfig(**decoder)), "AutoModelForCausalLM"),
        "qwen2": (lambda: Qwen2ForCausalLM(Qwen2Config(**decoder)), "AutoModelForCausalLM"),
        "gemma": (lambda: GemmaForCausalLM(GemmaConfig(**decoder, head_dim=8)), "AutoModelForCausalLM"),
        "gpt2": (
            lambda: GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
            "AutoModelForCausalLM",
        ),
        "mixtral": (
            lambda: MixtralForCausalLM(MixtralConfig(**decoder, num_local_experts=4, num_experts_per_tok=2)),
            "AutoModelForCausalLM",
        ),
        "bert": (lambda: BertModel(BertConfig(**text)), "AutoModel"),
        "t5": (
            lambda: T5ForConditionalGeneration(
                T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
            ),
            "AutoModelForSeq2SeqLM",
        ),
        "bart": (lambda: BartForConditionalGeneration(BartConfig(**seq2seq)), "AutoModelForSeq2SeqLM"),
        "vit": (lambda: ViTModel(ViTConfig(**vision)), "AutoModel"),
        "clip": (
            lambda: CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)),
            "AutoModel",
        ),
        "llava": (
            lambda: LlavaForConditionalGeneration(
                LlavaConfig(
                    text_config=LlamaConfig(**decoder), vision_config=CLIPVisionConfig(**vision), image_token_index=99
                )
            ),
            "AutoModelForImageTextToText",
        ),
    }
    return models


NATIVES = list(_natives()) + ["llama-bf16", "clip-without-logit-scale"]


@pytest.fixture(scope="module")
def native_folder(tmp_path_factory):
    """``native_folder(name)``: (folder, auto class, dtype) of a tiny native model saved with save_pretrained."""
    from safetensors.torch import load_file, save_file

    built: dict = {}
    factories = _natives()

    def get(name: str):
        if name not in built:
            base = name.split("-")[0]
            factory, auto = factories[base]
            folder = tmp_path_factory.mktemp(f"native-{name}")
            factory().save_pretrained(folder)
            dtype = torch.bfloat16 if name.endswith("bf16") else None
            if name == "clip-without-logit-scale":  # a key the checkpoint lacks (failure mode d, native)
                tensors = load_file(folder / "model.safetensors")
                tensors.pop("logit_scale")
                save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
            built[name] = (folder, auto, dtype)
        return built[name]

    return get


def failing(report) -> dict[str, str]:
    return {f.tensor: f.status for f in report.failures}


def full_audit(folder, auto: str, dtype=None, workarounds=()) -> dict[str, str]:
    model = loadguard.load(
        auto,
        folder,
        trust_remote_code=True,
        poison=True,
        on_problem="warn",
        workarounds=workarounds,
        **({"dtype": dtype} if dtype else {}),
    )
    report = model.loadguard_report_as_loaded
    assert (
        report.summary("checkpoint_fidelity").checked > 0
    )  # it compared weights: an empty audit would agree with anything
    return failing(report)


def scanned(folder, auto: str, dtype=None, workarounds=(), keys="header") -> dict[str, str]:
    report = loadguard.scan(
        folder, model_class=auto, trust_remote_code=True, dtype=dtype, workarounds=workarounds, keys=keys
    )
    assert report.mode == "scan" and all(f.predicted and f.detail.startswith("predicted: ") for f in report.findings)
    assert report.summary("checkpoint_fidelity").checked > 0  # it loaded weightless tensors: not an empty model
    return failing(report)


@pytest.mark.filterwarnings("ignore::loadguard.LoadguardWarning")
@pytest.mark.parametrize("name", ZOO)
def test_scan_equals_the_full_audit_on_every_zoo_entry(zoo_folder, name):
    workarounds = "auto" if zoo.get(name).workarounds else ()
    predicted = scanned(zoo_folder(name), "AutoModelForCausalLM", workarounds=workarounds)
    assert predicted == full_audit(zoo_folder(name), "AutoModelForCausalLM", workarounds=workarounds)
    if IS_V5:
        assert predicted == {f.tensor: f.status for f in zoo.get(name).expected_for(2)}


@pytest.mark.filterwarnings("ignore::loadguard.LoadguardWarning")
@pytest.mark.parametrize("name", NATIVES)
def test_scan_equals_the_full_audit_on_native_models(native_folder, name):
    folder, auto, dtype = native_folder(name)
    predicted = scanned(folder, auto, dtype)
    assert predicted == full_audit(folder, auto, dtype)
    if name == "clip-without-logit-scale" and IS_V5:
        assert predicted == {"logit_scale": "uninitialized"}


def test_complete_keys_assume_the_checkpoint_holds_every_key(zoo_folder, tmp_path):
    # no weights at all: only config and code
    folder = tmp_path / "no-weights"
    shutil.copytree(zoo_folder("missing_key"), folder)
    (folder / "model.safetensors").unlink()
    report = loadguard.scan(folder, trust_remote_code=True, assume_checkpoint="complete")
    assert report.checkpoint is None and not report.summary("missing_key").ran
    assert "every key of the model's state dict assumed present" in report.summary("missing_key").reason
    assert failing(report) == {}  # logit_scale would be loaded: nothing to predict
    saved = loadguard.scan(folder, trust_remote_code=True)  # the default: what this code's save_pretrained writes
    assert saved.checkpoint.startswith("no checkpoint headers: assumed") and saved.summary("missing_key").ran
    assert failing(saved) == {}  # it saves logit_scale: the same prediction
    with pytest.raises(ScanError, match="no safetensors checkpoint"):
        loadguard.scan(folder, trust_remote_code=True, keys="header")


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} overwrites nothing")
def test_a_wrong_scanner_fails_the_differential(zoo_folder, monkeypatch):
    """Skip the init step (what a naive 'load the keys, check the buffers' predictor does): the differential must
    catch it, or it proves nothing."""
    from transformers import PreTrainedModel

    monkeypatch.setattr(PreTrainedModel, "_initialize_missing_keys", lambda self, *args, **kwargs: None)
    differing = [
        name
        for name in ("overwritten", "clean", "missing_key")
        if scanned(zoo_folder(name), "AutoModelForCausalLM")
        != {f.tensor: f.status for f in zoo.get(name).expected_for(2)}
    ]
    assert differing == ["overwritten", "clean", "missing_key"]


def test_scan_leaves_torch_and_transformers_as_it_found_them(zoo_folder):
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    from transformers import PreTrainedModel

    init, to_empty = PreTrainedModel.__dict__["_initialize_missing_keys"], torch.nn.Module.to_empty
    deterministic = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    had_mask_utils = "transformers.modeling_attn_mask_utils" in __import__("sys").modules
    loadguard.scan(zoo_folder("minicpmv_like"), trust_remote_code=True, workarounds="auto")
    assert PreTrainedModel.__dict__["_initialize_missing_keys"] is init and torch.nn.Module.to_empty is to_empty
    assert torch.are_deterministic_algorithms_enabled() is deterministic
    assert torch.utils.deterministic.fill_uninitialized_memory is fill
    assert _get_current_dispatch_mode_stack() == [] and _get_current_function_mode_stack() == []
    # the workaround's stand-in for the module 5.0-5.24 removed is gone again (5.25 has its own back)
    assert ("transformers.modeling_attn_mask_utils" in __import__("sys").modules) is (
        had_mask_utils or __import__("importlib").util.find_spec("transformers.modeling_attn_mask_utils") is not None
    )


def test_the_causal_lm_class_is_chosen_not_the_first_auto_map_entry():
    from loadguard._hf.pretrained import resolve_class

    auto_map = {
        "AutoConfig": "configuration_x.XConfig",
        "AutoModelForSequenceClassification": "modeling_x.XForSequenceClassification",
        "AutoModelForCausalLM": "modeling_x.XForCausalLM",
        "AutoModel": "modeling_x.XModel",
    }
    assert (
        resolve_class(None, {"auto_map": auto_map, "architectures": ["XForCausalLM"]})
        is transformers.AutoModelForCausalLM
    )
    assert resolve_class(None, {"auto_map": auto_map}) is transformers.AutoModelForCausalLM
    assert resolve_class(None, {"auto_map": auto_map, "architectures": ["XModel"]}) is transformers.AutoModel
    assert resolve_class(None, {"architectures": ["LlamaForCausalLM"]}) is transformers.LlamaForCausalLM


def test_skip_init_parameters_stay_on_meta():
    """ChatGLM builds layers with torch.nn.utils.skip_init, which puts every parameter in real memory."""
    from loadguard._hf.patches import parameters_stay_on_meta

    with parameters_stay_on_meta():
        layer = torch.nn.utils.skip_init(torch.nn.Linear, 4096, 4096)
    assert layer.weight.device.type == "meta"
    assert torch.nn.utils.skip_init(torch.nn.Linear, 4, 4).weight.device.type == "cpu"  # restored


def test_code_that_quantizes_itself_is_scanned_without_building_its_weights(zoo_folder, tmp_path, monkeypatch):
    """int8 weights kept as persistent buffers (made in __init__ on the CPU): the checkpoint holds them, so the scan's
    reference does not build them (a 7B-shaped model: 7.2 GB and 18 s before, under 1 GB after; benchmarks/bench_scan.py);
    its non-persistent buffers are still compared. A folder that lacks one of them needs it built."""
    import importlib

    from loadguard._audit import reference as reference_module

    audit_module = importlib.import_module("loadguard._audit.auditing")  # where the scan asks for its reference
    asked = []
    build = reference_module.build_reference

    def recording(model, **kwargs):
        result = build(model, **kwargs)
        asked.append((kwargs.get("persistent_buffers", True), result))
        return result

    monkeypatch.setattr(audit_module, "build_reference", recording)
    folder = tmp_path / "int8"
    shutil.copytree(zoo_folder("int8_buffers"), folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=512, intermediate_size=4096)  # fc_in, fc_out: 4096 x 512 int8 = 2 MiB each
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").unlink()
    report = loadguard.scan(folder, trust_remote_code=True)
    persistent, built = asked[-1]
    assert persistent is False
    assert "layers.0.fc_in.weight" not in built.values and "layers.0.fc_in.weight" in built.unverifiable
    assert "layers.0.fc_in.weight_scale" in built.values  # small ones cost nothing: built as before
    assert torch.equal(built.values["positions.index"], torch.arange(config["max_position_embeddings"]))
    expected = (
        {f.tensor: f.status for f in zoo.get("int8_buffers").expected_for(config["num_hidden_layers"])}
        if IS_V5
        else {}
    )
    assert failing(report) == expected

    full = reference_module.build_reference(
        zoo.build_model("int8_buffers", hidden_size=512, intermediate_size=4096), use_cache=False
    )
    assert torch.equal(full.values["layers.0.fc_in.weight"], torch.zeros(4096, 512, dtype=torch.int8))

    from safetensors.torch import load_file, save_file

    lacking = tmp_path / "lacking"
    shutil.copytree(zoo_folder("int8_buffers"), lacking)
    tensors = load_file(lacking / "model.safetensors")
    del tensors["layers.0.fc_in.weight_scale"]
    save_file(tensors, lacking / "model.safetensors", metadata={"format": "pt"})
    loadguard.scan(lacking, trust_remote_code=True, keys="header")
    assert asked[-1][0] is True  # its value is needed: the reference builds persistent buffers


def test_large_tensors_are_created_on_meta_directly():
    from loadguard._hf.patches import large_tensors_on_meta

    with large_tensors_on_meta(threshold=1 << 20):
        big = torch.empty(1024, 1024)  # 4 MiB
        small = torch.zeros(16)
    assert big.device.type == "meta" and small.device.type == "cpu"


def _with_loader(zoo_folder, tmp_path, body: str):
    folder = tmp_path / "own-loader"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    modeling.write_text(
        modeling.read_text()
        + (
            "\n\nclass LgToyForCausalLM(LgToyForCausalLM):\n"
            "    @classmethod\n"
            "    def from_pretrained(cls, *args, **kwargs):\n" + body
        )
    )
    return folder


def test_a_model_with_its_own_loader_cannot_be_scanned(zoo_folder, tmp_path):
    from loadguard.cli import main

    # like nomic-bert's: it builds the model and reads its own weights, never through PreTrainedModel.from_pretrained
    folder = _with_loader(zoo_folder, tmp_path, "        return cls(kwargs['config'])\n")
    with pytest.raises(
        ScanError,
        match=r"loads its own weights \(LgToyForCausalLM.from_pretrained never calls PreTrainedModel.from_pretrained\)",
    ):
        loadguard.scan(folder, trust_remote_code=True)
    with pytest.raises(SystemExit) as info:
        main(["scan", str(folder), "--trust-remote-code"])
    assert info.value.code == 2


def test_an_own_loader_that_reads_its_weights_itself_is_a_scan_error_not_a_crash(zoo_folder, tmp_path):
    """nomic-bert's from_pretrained reads model.safetensors itself: given the folder (and no weights, as a weightless
    fix has it), it fails there; that is the scan's refusal with the reason, not 'the model's own code failed'."""
    folder = _with_loader(
        zoo_folder,
        tmp_path,
        (
            "        import os\n"
            "        path = os.path.join(args[0], 'model.safetensors')\n"
            "        if not os.path.exists(path):\n"
            "            raise ValueError(f'Model path {path} not found')\n"
            "        return cls(kwargs['config'])\n"
        ),
    )
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(ScanError, match=r"loads its own weights .* it failed reading them: ValueError: Model path"):
        loadguard.scan(folder, trust_remote_code=True)


def test_a_from_pretrained_that_delegates_is_scanned_through(zoo_folder, tmp_path):
    from transformers import PreTrainedModel

    before = PreTrainedModel.__dict__["from_pretrained"]
    folder = _with_loader(
        zoo_folder,
        tmp_path,
        (
            "        model = super().from_pretrained(*args, **kwargs)  # then adjusts what it loaded, as many do\n"
            "        model.generation_config.max_new_tokens = 7\n"
            "        return model\n"
        ),
    )
    report = loadguard.scan(folder, trust_remote_code=True)
    assert PreTrainedModel.__dict__["from_pretrained"] is before
    if IS_V5:  # transformers 4 leaves the buffers as the code computed them
        assert {f.tensor for f in report.failures} == {
            "positions.table",
            "positions.index",
            "layers.0.attn.causal_mask",
            "layers.1.attn.causal_mask",
        }
    # what the scan predicts is what a full load (through the same override) gets
    model = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, poison=True)
    assert model.generation_config.max_new_tokens == 7  # the override ran on the model it expects
    assert {f.tensor for f in model.loadguard_report_as_loaded.failures} == {f.tensor for f in report.failures}


def test_an_override_that_reads_its_path_argument_is_given_the_folder(zoo_folder, tmp_path):
    """A published diffusion LM's from_pretrained loads its own generation config from the path it is given: a scan
    passes the folder to the override, and None (no file read) only to the weightless base load below it."""
    folder = _with_loader(
        zoo_folder,
        tmp_path,
        (
            "        from transformers import GenerationConfig\n"
            "        generation = GenerationConfig.from_pretrained(args[0])  # fails on None\n"
            "        model = super().from_pretrained(*args, **kwargs)\n"
            "        model.generation_config = generation\n"
            "        return model\n"
        ),
    )
    report = loadguard.scan(folder, trust_remote_code=True)
    assert report.mode == "scan"
    if IS_V5:
        assert {f.tensor for f in report.failures} == {
            "positions.table",
            "positions.index",
            "layers.0.attn.causal_mask",
            "layers.1.attn.causal_mask",
        }


def _hub_cache(root, repo_id: str, files) -> None:
    """A Hugging Face cache holding one snapshot of ``repo_id`` (what `hf download` leaves)."""
    revision = "0" * 40
    base = root / f"models--{repo_id.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(revision)
    snapshot = base / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for file in files:
        shutil.copy(file, snapshot / file.name)


def test_hub_ids_use_the_cache_offline_and_fetch_only_config_and_code(zoo_folder, tmp_path, monkeypatch):
    folder = zoo_folder("np_buffer")
    _hub_cache(
        tmp_path / "hub", "lg-org/tiny-np-buffer", [p for p in folder.iterdir() if p.suffix in (".json", ".py")]
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    report = loadguard.scan("lg-org/tiny-np-buffer", trust_remote_code=True)
    assert report.model == "lg-org/tiny-np-buffer" and report.checkpoint.startswith(
        "no checkpoint headers: assumed"
    )  # a Hub id: headers only when asked
    if IS_V5:
        assert set(failing(report)) == {
            "positions.table",
            "positions.index",
            "layers.0.attn.causal_mask",
            "layers.1.attn.causal_mask",
        }
    with pytest.raises(
        ModelNotFoundError,
        match=r"not in the Hugging Face cache, and the Hub cannot be reached \(offline: HF_HUB_OFFLINE is set\)",
    ):
        loadguard.scan("lg-org/not-cached", trust_remote_code=True)


def test_fleet_rows_json_markdown_and_exit_codes(zoo_folder, tmp_path, capsys):
    from loadguard.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as info:
            main(list(args))
        return info.value.code, capsys.readouterr()

    fleet = tmp_path / "fleet.txt"
    fleet.write_text(
        f"# three models\n{zoo_folder('clean')}\n{zoo_folder('typing_alias')}\n{zoo_folder('overwritten')}\n"
    )
    code, captured = run(
        "scan", "--from", str(fleet), "--trust-remote-code", "--workaround", "none", "--format", "json", "--jobs", "2"
    )
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [row["scanned"] for row in rows] == [True, False, True]  # its code fails to import (current torch): a row
    assert code == 3  # partial: one of three could not be scanned
    assert "--workaround remote-code-typing-aliases" in rows[1]["error"]["hint"] and rows[1]["error"]["fixes"] == [
        "remote-code-typing-aliases"
    ]
    assert rows[1]["error"]["kind"] == "RemoteCodeImportError" and rows[1]["ok"] is False
    if IS_V5:
        assert [f["tensor"] for f in rows[2]["findings"]] == ["lm_head.weight"]
    code, captured = run(
        "scan",
        str(zoo_folder("clean")),
        str(zoo_folder("typing_alias")),
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--format",
        "markdown",
    )
    assert captured.out.splitlines()[0].startswith("| model | class | verdict |") and captured.out.count("\n| ") >= 2
    code, captured = run("scan", str(tmp_path / "nope"), str(tmp_path / "nope2"))
    assert code == 2 and "none of the models could be scanned" in captured.err
    code, captured = run("scan", str(zoo_folder("clean")), "--trust-remote-code")
    assert code == 0 and "predicted clean" in captured.out
    code, captured = run("scan", str(zoo_folder("typing_alias")), "--trust-remote-code", "--workaround", "auto")
    assert (
        "workaround remote-code-typing-aliases (before_import): applied, " in captured.out
    )  # printed as an audit prints it
    assert "(auto: the load failed with the model's own code failed" in captured.out


def test_a_quantized_checkpoint_scans_without_its_backend(zoo_folder, tmp_path, capsys):
    """A GPTQ config with no optimum installed: the full load says which package it needs; the scan needs none and
    predicts the model its quantizer would quantize (its buffers included), saying what it leaves out."""
    from loadguard.cli import main

    folder = tmp_path / "gptq"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
    }
    (folder / "config.json").write_text(json.dumps(config))
    import importlib.util

    if importlib.util.find_spec("optimum") is None:
        with pytest.raises(SystemExit) as info:
            main(["audit", str(folder), "--trust-remote-code"])
        err = capsys.readouterr().err
        assert (
            info.value.code == 2
            and "needs a quantization backend" in err
            and "Hint: pip install optimum" in err
            and "loadguard scan" in err
        )
    report = loadguard.scan(folder, trust_remote_code=True)
    assert failing(report) == ({f.tensor: f.status for f in zoo.get("np_buffer").expected_for(2)} if IS_V5 else {})
    assert (
        "gptq-quantized checkpoint: predicted as the model before quantization"
        in report.summary("checkpoint_fidelity").reason
    )
    with pytest.raises(ScanError, match="headers hold the quantizer's tensors"):
        loadguard.scan(folder, trust_remote_code=True, keys="header")


def test_without_headers_a_scan_assumes_what_the_codes_own_save_writes(zoo_folder, tmp_path, capsys):
    """v4-era code with declared ties and no checkpoint to read: by default the scan predicts the load of what its own
    save_pretrained writes (the tied tables left out), which on transformers 5 leaves them untied, as the header scan of
    the saved checkpoint says; --assume-checkpoint complete assumes every key and cannot see it. The row names which."""
    from loadguard._scan.scanning import SAVED_ASSUMPTION
    from loadguard.cli import main

    folder = tmp_path / "weightless"
    shutil.copytree(zoo_folder("v4_tied_list"), folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()

    def scan_json(*args):
        with pytest.raises(SystemExit):
            main(["scan", *map(str, args), "--trust-remote-code", "--format", "json"])
        return json.loads(capsys.readouterr().out.splitlines()[0])

    headers = scan_json(zoo_folder("v4_tied_list"))
    saved = scan_json(folder)
    complete = scan_json(folder, "--assume-checkpoint", "complete")
    tables = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    wrong = {
        name: {f["tensor"] for f in row["findings"] if f["status"] not in ("initialized", "unverifiable")}
        for name, row in (("headers", headers), ("saved", saved), ("complete", complete))
    }
    assert saved["checkpoint"] == SAVED_ASSUMPTION and complete["checkpoint"] is None
    assert SAVED_ASSUMPTION in next(c["reason"] for c in saved["checks"] if c["check"] == "missing_key")
    assert "every key of the model's state dict assumed present" in next(
        c["reason"] for c in complete["checks"] if c["check"] == "missing_key"
    )
    if IS_V5:
        assert tables <= wrong["headers"] and wrong["saved"] == wrong["headers"] and not tables & wrong["complete"]
    else:
        assert not tables & wrong["saved"]  # transformers 4 ties the list: nothing left untied


def test_a_process_that_forks_scans_does_a_first_scans_work_once_and_silently(capsys):
    """``warm`` (run before a fleet, a native sweep or a matrix worker forks) scans a built-in model once: the
    modules a scan imports inside functions are imported, transformers' conversion table (~1000 patterns compiled on a
    5.x process's first load) is built, every workaround's failure pattern compiled; nothing is printed and nothing
    reaches a listener. A child then inherits all of it: measured ~75 ms a model on 2 cores."""
    import sys

    from loadguard._infra import observers as _observers
    from loadguard._scan.warmup import warm
    from loadguard.workarounds import _registry

    heard = []
    stop = _observers.listen(lambda event, payload: heard.append(event))
    try:
        assert warm() is True
    finally:
        stop()
    out = capsys.readouterr()
    assert out.out == "" and out.err == "" and heard == []
    assert {
        "loadguard._hf.origins",
        "loadguard._scan.selfcheck",
        "loadguard._audit.where",
        "loadguard._hf.loading_info",
    } <= set(sys.modules)
    patterns = {s.pattern for w in _registry.all_workarounds() for s in w.fixes}
    assert patterns and _registry._regex.cache_info().currsize >= len(patterns)
    if IS_V5:
        from transformers import conversion_mapping

        assert conversion_mapping._checkpoint_conversion_mapping_cache is not None


def test_scanning_a_config_without_a_dtype_says_nothing_of_torch_dtype(monkeypatch):
    """A 5.x config's ``torch_dtype`` is a property that logs a deprecation (once per process); the scan reads a 4.x
    config's attribute only, so a user scanning a config is not told about a name they never used."""
    from transformers import configuration_utils

    said = []
    for method in ("warning", "warning_once"):
        monkeypatch.setattr(
            configuration_utils.logger, method, lambda message, *args, **kwargs: said.append(str(message))
        )
    config = transformers.LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=32
    )
    loadguard.scan(config)
    assert not [message for message in said if "torch_dtype" in message]
