"""The zoo is real: each entry's folder loads with a plain from_pretrained and breaks exactly as described."""

from __future__ import annotations

import json

import pytest
import torch

from loadguard import poison, zoo
from loadguard.errors import FolderNotEmptyError, InvalidOptionError, UnknownZooEntryError
from loadguard.zoo._tokenizer import SPECIAL_TOKENS

from ..conftest import IS_V5, TRANSFORMERS_VERSION, all_tensors, layer_count, load

BROKEN = [e.name for e in zoo.entries() if e.failure_mode]
CLEAN = [e.name for e in zoo.entries() if not e.failure_mode]


def is_poison(tensor: torch.Tensor) -> bool:
    """Every element is what poison() fills uninitialized memory with."""
    if tensor.dtype.is_floating_point:
        return bool(torch.isnan(tensor).all())
    if tensor.dtype == torch.bool:
        return bool(tensor.all())
    return bool((tensor == torch.iinfo(tensor.dtype).max).all())


def test_entries_cover_each_failure_mode():
    modes = {e.failure_mode for e in zoo.entries()}
    assert {"a", "b", "c", "d", "e"} <= modes
    assert "clean" in CLEAN and "minicpmv_like_fixed" in CLEAN
    assert any(e.shards > 1 for e in zoo.entries())


def test_unknown_entry_says_what_exists():
    with pytest.raises(UnknownZooEntryError) as info:
        zoo.get("nope")
    assert "minicpmv_like" in info.value.hint


def test_folder_layout_is_a_real_remote_code_model(zoo_folder):
    folder = zoo_folder("minicpmv_like")
    names = {p.name for p in folder.iterdir()}
    assert {
        "config.json",
        "configuration_lgminicpmv.py",
        "modeling_lgminicpmv.py",
        "image_processing_lgminicpmv.py",
        "processing_lgminicpmv.py",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
        "processor_config.json",
    } <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_lgminicpmv.LgMiniCPMV"
    assert sum(p.stat().st_size for p in folder.iterdir()) < 5_000_000


def test_sharded_entry_has_an_index(zoo_folder):
    folder = zoo_folder("sharded")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    assert all((folder / shard).exists() for shard in index["weight_map"].values())


def test_build_is_deterministic(tmp_path):  # build time and size: benchmarks/bench_zoo.py
    first = zoo.build("np_buffer", tmp_path / "one")
    second = zoo.build("np_buffer", tmp_path / "two")
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    other_seed = zoo.build("np_buffer", tmp_path / "three", seed=1)
    assert (first / "model.safetensors").read_bytes() != (other_seed / "model.safetensors").read_bytes()


def test_size_knob_changes_the_model(tmp_path):
    model = zoo.build_model("clean", hidden_size=64, num_hidden_layers=3, vocab_size=100)
    assert model.embed_tokens.weight.shape == (100, 64)
    assert len(model.layers) == 3
    with pytest.raises(InvalidOptionError, match="not a setting"):
        zoo.build_model("clean", hiden_size=64)


def test_build_never_writes_over_a_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(FolderNotEmptyError):
        zoo.build("clean", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("name", BROKEN)
def test_broken_entry_reproduces_its_failure(zoo_folder, name):
    entry = zoo.get(name)
    truth = zoo.build_model(name)
    with poison():
        model = load(zoo_folder(name))
    expected = {f.tensor: f.status for f in entry.expected_for(layer_count(truth.config))}
    loaded, reference = all_tensors(model), all_tensors(truth)
    assert set(loaded) == set(reference)
    observed = {}
    for key, want in reference.items():
        got = loaded[key]
        if got.device.type == "meta":
            observed[key] = "on_meta"
        elif not torch.equal(got, want):
            if key in entry.drop_keys and not is_poison(
                got
            ):  # absent from the checkpoint, initialized by code: an untied tie
                observed[key] = "mismatch"
                continue
            observed[key] = (
                "overwritten" if key in dict(truth.named_parameters()) and not is_poison(got) else "uninitialized"
            )
            if observed[key] == "uninitialized":
                assert is_poison(got), f"{key} differs but is not poison-filled"
    if not observed:
        pytest.skip(
            f"transformers {TRANSFORMERS_VERSION} loads {name} correctly: failure mode {entry.failure_mode} does not occur"
        )
    assert observed == expected


@pytest.mark.parametrize("name", CLEAN)
def test_clean_entry_loads_bit_identical(zoo_folder, name):
    truth = zoo.build_model(name)
    with poison():
        model = load(zoo_folder(name))
    loaded, reference = all_tensors(model), all_tensors(truth)
    assert set(loaded) == set(reference)
    for key, want in reference.items():
        assert loaded[key].dtype == want.dtype
        assert torch.equal(loaded[key], want), key


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} predates the v5 loading pipeline")
def test_installed_transformers_v5_reproduces_the_bug(zoo_folder):
    """The premise of the whole project, measured rather than assumed."""
    with poison():
        model = load(zoo_folder("minicpmv_like"))
    assert torch.isnan(model.resampler.pos_embed).all()


def _greedy(model, processor, entry, max_new_tokens=8):
    """Greedy token ids (through the model's own generate, as MiniCPM-V 2.6's is called) and the smallest
    top-1/top-2 score gap over the demo prompts and the example suite's image sizes (a sliced one included)."""
    from loadguard.zoo._images import demo_images

    images = demo_images(list(entry.image_sizes) + [(64, 48)])
    outputs, margin = [], float("inf")
    cases = [(entry.prompts[1], images[:2]), (entry.prompts[1], [images[3], images[3]])]
    cases += [(entry.prompts[0], [image]) for image in images]
    for prompt, imgs in cases:
        inputs = processor(text=prompt, images=imgs)
        inputs.pop("image_sizes")
        out = model.generate(
            **inputs,
            tokenizer=processor.tokenizer,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
        )
        for scores in out.scores:
            top = scores[0].float().topk(2).values
            margin = min(margin, float(top[0] - top[1]))
        outputs.append(out.sequences[0].tolist())  # generate from inputs_embeds: the new tokens only
    return outputs, margin


def test_minicpmv_like_output_is_stable_and_depends_on_pos_embed(zoo_folder):
    from transformers import AutoProcessor

    entry = zoo.get("minicpmv_like_fixed")
    folder = zoo_folder("minicpmv_like_fixed")
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    model = load(folder)
    good, margin = _greedy(model, processor, entry)
    assert margin > 1.0, "the correct model's greedy choices must not be near-ties"
    assert len({tuple(ids) for ids in good}) == len(good), "different images must give different outputs"
    assert _greedy(load(folder), processor, entry)[0] == good
    assert all(len(ids) == 8 and min(ids) >= len(SPECIAL_TOKENS) for ids in good)  # words only, never a terminator
    table = model.resampler.pos_embed.clone()
    noise = torch.randn(table.shape, generator=torch.Generator().manual_seed(0))
    for corrupt in (torch.zeros_like(table), noise, torch.full_like(table, 1e37)):
        model.resampler.pos_embed.copy_(corrupt)
        broken, _ = _greedy(model, processor, entry)
        changed = sum(b != g for b, g in zip(broken, good))
        assert changed == len(good), (broken, good)
    model.resampler.pos_embed.fill_(float("nan"))
    assert _greedy(model, processor, entry)[0] == [[0] * 8] * len(good)  # "!!!!!!!!"
    model.resampler.pos_embed.copy_(table)
    assert _greedy(model, processor, entry)[0] == good


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} predates the v5 loading pipeline")
def test_minicpmv_like_as_loaded_writes_garbage(zoo_folder):
    from transformers import AutoProcessor

    entry = zoo.get("minicpmv_like")
    folder = zoo_folder("minicpmv_like")
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    good, _ = _greedy(zoo.build_model("minicpmv_like"), processor, entry)
    with poison():
        model = load(folder)
    broken, _ = _greedy(model, processor, entry)
    assert broken == [[0] * 8] * len(good)


@pytest.mark.parametrize("name", [e.name for e in zoo.entries() if e.workarounds])
def test_entry_fails_to_load_like_the_real_one(zoo_folder, name):
    from transformers import AutoModelForCausalLM

    from loadguard import workarounds

    entry = zoo.get(name)
    folder = zoo_folder(name)
    workarounds.forget_remote_code(folder)
    if entry.load_error is None:  # every thing its code needs is back in these versions: a plain load works
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
        assert type(model).__name__ == zoo.build_model(name).__class__.__name__
        return
    kind, _, message = entry.load_error.partition(": ")
    try:
        AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    except Exception as error:  # the exact exception the entry documents for the versions installed here
        assert type(error).__name__ == kind and str(error).startswith(message), (type(error).__name__, str(error))
    else:
        pytest.fail(
            f"transformers {TRANSFORMERS_VERSION} loads {name}, but its entry says it fails with {entry.load_error}"
        )
    model = load(folder)  # inside the workarounds the entry declares, it loads
    assert type(model).__name__ == zoo.build_model(name).__class__.__name__
