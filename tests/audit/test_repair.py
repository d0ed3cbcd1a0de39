"""repair(): every repairable zoo failure is fixed, the model then behaves like the fixed model."""

from __future__ import annotations

import pytest
import torch

import loadguard
from loadguard import zoo

from ..conftest import IS_V5, TRANSFORMERS_VERSION, all_tensors, load

pytestmark = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")
REPAIRABLE = [
    "minicpmv_like",
    "np_buffer",
    "np_buffer_in_checkpoint",
    "shared_buffer",
    "overwritten",
    "sharded",
    "tensor_attribute",
]


@pytest.mark.parametrize("name", REPAIRABLE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_repair_makes_the_model_equal_to_its_definition(zoo_folder, name, dtype):
    with loadguard.poison():
        model = load(zoo_folder(name), dtype=dtype)
    before = loadguard.audit(model)
    result = loadguard.repair(model, before)
    assert result.ok and result.unrepaired == ()
    assert set(result.repaired) == {f.tensor for f in before.failures} | {
        n for f in before.failures for n in (f.alias_of,) if n
    }
    truth = all_tensors(zoo.build_model(name))
    for key, value in all_tensors(model).items():
        expected = truth[key].to(value.dtype)
        assert value.device.type == "cpu" and torch.equal(value, expected), key


def test_repair_keeps_parameter_objects_and_dtype(zoo_folder):
    with loadguard.poison():
        model = load(zoo_folder("overwritten"), dtype=torch.bfloat16)
    weight = model.lm_head.weight
    loadguard.repair(model, loadguard.audit(model))
    assert model.lm_head.weight is weight and weight.dtype == torch.bfloat16


def test_repair_re_shares_aliases_left_on_meta(zoo_folder):
    with loadguard.poison():
        model = load(zoo_folder("shared_buffer"))
    assert model.layers[1].attn.causal_mask.device.type == "meta"
    loadguard.repair(model, loadguard.audit(model))
    assert model.layers[1].attn.causal_mask is model.layers[0].attn.causal_mask
    assert torch.equal(model.layers[0].attn.causal_mask, torch.tril(torch.ones(64, 64, dtype=torch.bool)))
    model(torch.tensor([[10, 11, 12]]))  # runs again


def test_unrepairable_missing_key_is_reported_not_hidden(zoo_folder):
    with loadguard.poison():
        model = load(zoo_folder("missing_key"))
    result = loadguard.repair(model, loadguard.audit(model))
    assert not result.ok and result.repaired == ()
    (left,) = result.unrepaired
    assert left.tensor == "logit_scale" and "no value anywhere" in left.reason
    assert [f.tensor for f in result.after.failures] == ["logit_scale"]


def test_repair_is_all_or_nothing(zoo_folder, monkeypatch):
    with loadguard.poison():
        model = load(zoo_folder("np_buffer"))
    report = loadguard.audit(model)
    before = {k: v.clone() for k, v in model.named_buffers()}
    original_to = torch.Tensor.to
    calls = {"n": 0}

    def failing_to(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("out of memory")
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", failing_to)
    with pytest.raises(RuntimeError, match="out of memory"):
        loadguard.repair(model, report)
    monkeypatch.undo()
    for key, value in model.named_buffers():  # still the poisoned values: nothing was assigned
        assert torch.equal(torch.nan_to_num(value), torch.nan_to_num(before[key])), key


def test_repaired_vlm_generates_like_the_fixed_variant(zoo_folder):
    from transformers import AutoProcessor

    from loadguard.zoo._images import demo_images

    entry = zoo.get("minicpmv_like")
    processor = AutoProcessor.from_pretrained(zoo_folder("minicpmv_like"), trust_remote_code=True)
    images = demo_images(entry.image_sizes)
    inputs = processor(text=entry.prompts[1], images=images[:2])
    inputs.pop("image_sizes")

    def greedy(model):  # MiniCPM-V's generate: from inputs_embeds, under inference_mode, new tokens only
        return model.generate(**inputs, tokenizer=processor.tokenizer, max_new_tokens=8, do_sample=False)[0].tolist()

    with loadguard.poison():
        broken = load(zoo_folder("minicpmv_like"))
    fixed = greedy(load(zoo_folder("minicpmv_like_fixed")))
    assert greedy(broken) != fixed
    assert loadguard.repair(broken, loadguard.audit(broken)).ok
    assert greedy(broken) == fixed
