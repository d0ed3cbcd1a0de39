from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from loadguard import zoo
from loadguard._audit.reference import build_reference, clear_cache
from loadguard.errors import ReferenceBuildError


class TinyConfig(PretrainedConfig):
    model_type = "loadguard-tiny-ref"

    def __init__(self, size=4, explode=False, **kwargs):
        self.size = size
        self.explode = explode
        super().__init__(**kwargs)


class Tiny(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        if config.explode:
            raise RuntimeError("needs a GPU")
        self.proj = nn.Linear(config.size, config.size)
        self.register_buffer("table", torch.arange(config.size, dtype=torch.float32) * 0.5, persistent=False)
        self.register_buffer("noise", torch.randn(config.size), persistent=False)
        self.register_buffer("derived", self.proj.weight.sum(0).detach(), persistent=False)
        self.post_init()

    def _init_weights(self, module):
        pass


def test_reference_holds_what_init_computes():
    model = Tiny(TinyConfig())
    ref = build_reference(model, use_cache=False)
    assert torch.equal(ref.values["table"], torch.arange(4.0) * 0.5)


def test_random_and_derived_buffers_are_unverifiable_with_reasons():
    ref = build_reference(Tiny(TinyConfig()), use_cache=False)
    assert "random" in ref.unverifiable["noise"]
    assert "derived from parameters" in ref.unverifiable["derived"]
    assert "noise" not in ref.values and "derived" not in ref.values


def test_reference_leaves_rng_untouched():
    model = Tiny(TinyConfig())
    state = torch.random.get_rng_state()
    build_reference(model, use_cache=False)
    assert torch.equal(state, torch.random.get_rng_state())


def test_reference_is_cached_per_class_and_config():
    clear_cache()
    model = Tiny(TinyConfig())
    assert build_reference(model) is build_reference(model)
    assert build_reference(Tiny(TinyConfig(size=6))) is not build_reference(model)


def test_constructor_failure_is_a_typed_error():
    model = Tiny(TinyConfig())
    model.config.explode = True
    with pytest.raises(ReferenceBuildError, match="RuntimeError: needs a GPU"):
        build_reference(model, use_cache=False)


def test_reference_matches_an_eager_build_for_zoo_models():
    for name in ("minicpmv_like", "np_buffer", "shared_buffer"):
        eager = zoo.build_model(name)
        ref = build_reference(eager, use_cache=False)
        for key, value in eager.named_buffers(remove_duplicate=False):
            assert torch.equal(ref.values[key], value), (name, key)
    shared = build_reference(zoo.build_model("shared_buffer"), use_cache=False)
    assert shared.group("layers.1.attn.causal_mask") == ["layers.0.attn.causal_mask", "layers.1.attn.causal_mask"]


def test_a_parameter_too_large_to_allocate_is_built_on_meta_directly():
    """accelerate creates every parameter on CPU before moving it to meta: fused experts of 25-77 GB fail to
    allocate there. The reference then creates tensors over 1 GiB on meta; buffers stay real."""
    from torch import nn

    from loadguard._audit.reference import _construct

    class Huge(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.experts = nn.Parameter(torch.empty(200_000, 1_000_000, dtype=torch.bfloat16))  # 400 GB
            self.register_buffer("table", torch.arange(4.0), persistent=False)

    model = _construct(Huge, None)
    assert model.experts.device.type == "meta" and torch.equal(model.table, torch.arange(4.0))
