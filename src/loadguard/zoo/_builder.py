"""Writes zoo entries into real model folders."""

from __future__ import annotations

import importlib
import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import FolderNotEmptyError, InvalidOptionError
from ._entries import ZooEntry, get
from ._tokenizer import SPECIAL_TOKENS, write_tokenizer



@dataclass(frozen=True)
class _Family:
    """Where a family's code lives and which classes it names."""

    package: str  # templates sub-package whose modeling code is built in memory
    config_class: str
    model_class: str
    remote_model: str  # what config.json's auto_map names: "modeling_x.Class"
    code: tuple[str, ...]  # template sub-packages whose files are written into the folder
    image_processor: str | None = None
    processor: str | None = None
    model_type: str | None = None  # a model type of its own on top of ``package``'s configuration

    @property
    def config_module(self) -> str:
        return f"configuration_{self.model_type or self.package}"


_FAMILIES = {
    "lgtoy": _Family("lgtoy", "LgToyConfig", "LgToyForCausalLM", "modeling_lgtoy.LgToyForCausalLM", ("lgtoy",)),
    "lgminicpmv": _Family(
        "lgminicpmv",
        "LgMiniCPMVConfig",
        "LgMiniCPMV",
        "modeling_lgminicpmv.LgMiniCPMV",
        ("lgminicpmv",),
        image_processor="LgMiniCPMVImageProcessor",
        processor="LgMiniCPMVProcessor",
    ),
    # the toy model behind a module that fails to import: its weights are the toy's
    "lgtyping": _Family(
        "lgtoy",
        "LgTypingConfig",
        "LgToyForCausalLM",
        "modeling_lgtyping.LgTypingForCausalLM",
        ("lgtoy", "lgtyping"),
        model_type="lgtyping",
    ),
    # the toy model as remote code written for transformers 4.x: its weights are the clean toy's
    "lgv4": _Family("lgtoy", "LgV4Config", "LgToyForCausalLM", "modeling_lgv4.LgV4ForCausalLM", ("lgtoy", "lgv4"), model_type="lgv4"),
}
# Seed 26 gives the demo VLM greedy outputs with a wide top-1 logit margin (> 1.1) on its demo prompts,
# all of which change when pos_embed is corrupted (zeros, noise, 1e37, NaN).
_DEFAULT_SEED = 26
MARKER = "loadguard_zoo.json"  # which zoo entry a folder is, with its demo prompts and image sizes


def _classes(family_name: str):
    family = _FAMILIES[family_name]
    package = f"loadguard.zoo.templates.{family.package}"
    configuration = importlib.import_module(f"{package}.configuration_{family.package}")
    config_cls = next(v for v in vars(configuration).values() if isinstance(v, type) and getattr(v, "model_type", None) == family.package)
    model_cls = getattr(importlib.import_module(f"{package}.modeling_{family.package}"), family.model_class)
    return config_cls, model_cls


def _config(entry: ZooEntry, overrides: dict[str, Any]):
    config_cls, _ = _classes(entry.family)
    known = set(config_cls().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise InvalidOptionError(
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a setting of the {entry.name} model",
            "use the config fields the model has, e.g. hidden_size, num_hidden_layers, vocab_size",
        )
    return config_cls(**{**entry.config, **overrides})


def _shape_minicpmv(model: torch.nn.Module) -> None:
    """Give the VLM weights that make its greedy output depend strongly on where image content sits.

    The vision encoder has no position information of its own, so the resampler's ``pos_embed`` (added
    to the keys) is the only thing that tells one image region from another. Sharp, position-led
    cross-attention (small content keys, scaled query/key projections) and large image embeddings in the
    LM make the generated text follow the image layout, as a trained model's would.
    """
    resampler = model.resampler
    dim = resampler.embed_dim
    with torch.no_grad():
        resampler.ln_kv.weight.fill_(0.1)
        resampler.attn.in_proj_weight[: 2 * dim].mul_(4.0)
        model.vpm.patch_embed.weight.mul_(8.0)
        model.embed_positions.normal_(0.0, 1.0)
        model.embed_tokens.weight.normal_(0.0, 0.1)
        for layer in model.layers:
            for linear in (layer.qkv, layer.o_proj, layer.fc_in, layer.fc_out):
                linear.weight.normal_(0.0, linear.in_features**-0.5)
        model.lm_head.weight.normal_(0.0, 4.0)
        # Feature 0 of the final norm is constant 1, so lm_head column 0 acts as a bias: special tokens
        # are never generated, as in a trained model (all-NaN logits still argmax to "!", id 0).
        model.norm.weight[0] = 0.0
        model.norm.bias[0] = 1.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[: len(SPECIAL_TOKENS), 0] = -100.0


def build_model(name: str, *, seed: int = _DEFAULT_SEED, **config_overrides: Any) -> torch.nn.Module:
    """The zoo model ``name`` constructed eagerly in memory, exactly as :func:`build` saves it.

    Its parameters are the checkpoint's and its buffers are what its code computes: the ground truth a
    correct load must reproduce.
    """
    entry = get(name)
    config = _config(entry, config_overrides)
    _, model_cls = _classes(entry.family)
    devices_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = model_cls(config)
        if entry.family == "lgminicpmv":
            _shape_minicpmv(model)
    finally:
        torch.random.set_rng_state(devices_state)
    return model.eval()


def _checkpoint_tensors(entry: ZooEntry, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if entry.save_non_persistent_buffers:
        persistent = set(tensors)
        for key, value in model.named_buffers():
            if key not in persistent:
                tensors[key] = value.detach().clone().contiguous()
    for key in entry.drop_keys:
        tensors.pop(key)
    return tensors


def _save_weights(folder: Path, tensors: dict[str, torch.Tensor], shards: int) -> None:
    metadata = {"format": "pt"}
    if shards <= 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata=metadata)
        return
    keys = list(tensors)
    per_shard = -(-len(keys) // shards)
    weight_map, total = {}, 0
    for index in range(shards):
        chunk = keys[index * per_shard : (index + 1) * per_shard]
        filename = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: tensors[k] for k in chunk}, str(folder / filename), metadata=metadata)
        weight_map.update(dict.fromkeys(chunk, filename))
        total += sum(tensors[k].numel() * tensors[k].element_size() for k in chunk)
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")


def _write_code(folder: Path, family: _Family) -> None:
    for package in family.code:
        for item in resources.files(f"loadguard.zoo.templates.{package}").iterdir():
            if item.name.endswith(f"_{package}.py"):
                (folder / item.name).write_text(item.read_text())


def _write_json(path: Path, document: dict) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def build(name: str, folder: str | Path, *, seed: int = _DEFAULT_SEED, **config_overrides: Any) -> Path:
    """Write zoo entry ``name`` as a model folder and return its path.

    ``config_overrides`` set config fields: the size knobs ``hidden_size``, ``num_hidden_layers``,
    ``vocab_size`` (and ``intermediate_size``, ``num_attention_heads``, ...). The folder must be new or
    empty; nothing is ever written over. Deterministic: the same name, seed and overrides give the same
    bytes.
    """
    entry = get(name)
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FolderNotEmptyError(str(folder))
    model = build_model(name, seed=seed, **config_overrides)
    config = model.config
    family = _FAMILIES[entry.family]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _write_code(folder, family)
        config.architectures = [family.remote_model.split(".")[1]]
        config.auto_map = {
            "AutoConfig": f"{family.config_module}.{family.config_class}",
            "AutoModel": family.remote_model,
            "AutoModelForCausalLM": family.remote_model,
        }
        config.save_pretrained(str(folder))
        if family.model_type:  # the configuration file written declares its own model type
            document = json.loads((folder / "config.json").read_text())
            document["model_type"] = family.model_type
            _write_json(folder / "config.json", document)
        _save_weights(folder, _checkpoint_tensors(entry, model), entry.shards)
        write_tokenizer(folder, config.vocab_size)
        _write_json(
            folder / MARKER,
            {"entry": entry.name, "prompts": list(entry.prompts), "image_sizes": [list(s) for s in entry.image_sizes]},
        )
        specials = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
        _write_json(
            folder / "generation_config.json",
            {
                "bos_token_id": specials["<s>"],
                "eos_token_id": specials["</s>"],
                "pad_token_id": specials["<pad>"],
                "do_sample": False,
                "use_cache": False,
            },
        )
        if family.image_processor:
            auto_map = {
                "AutoImageProcessor": f"image_processing_{family.package}.{family.image_processor}",
                "AutoProcessor": f"processing_{family.package}.{family.processor}",
            }
            _write_json(
                folder / "preprocessor_config.json",
                {
                    "auto_map": auto_map,
                    "image_processor_type": family.image_processor,
                    "processor_class": family.processor,
                    "patch_size": config.patch_size,
                    "max_grid": 16,
                },
            )
            _write_json(
                folder / "processor_config.json",
                {"auto_map": auto_map, "processor_class": family.processor, "query_num": config.query_num},
            )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
