"""The v4-compatibility workarounds give back exactly what transformers 4.x had.

Two legs, one table of cases: on transformers 4.57 (``make test-compat``) each thing the workarounds rebuild is
compared with 4.57's own object; on transformers 5.x (``make test``) the workarounds' answers are checked
against the same table, and against what 5.x itself hands transformers' own code (which must not change).
"""

from __future__ import annotations

import itertools
import sys

import pytest
import torch

from loadguard import workarounds as registry
from loadguard.workarounds import _attn_mask_v4 as ours
from loadguard.workarounds.transformers_v4 import V4_GENERATION_DEFAULTS, is_torch_fx_available, v4_rope_scaling

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v4 = pytest.mark.skipif(
    IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} has no 4.x objects to compare with: runs in make test-compat"
)
needs_v5 = pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} is what these workarounds stand in for"
)

# rope_scaling as a v4 remote config stores it -> what transformers 5 standardizes it into (checked on 5.x below)
ROPE_CASES = {
    "null": (None, {"rope_theta": 10000.0, "rope_type": "default"}),
    "linear": (
        {"type": "linear", "factor": 2.0},
        {"type": "linear", "factor": 2.0, "rope_theta": 10000.0, "rope_type": "linear"},
    ),
    "dynamic": (
        {"type": "dynamic", "factor": 4.0},
        {"type": "dynamic", "factor": 4.0, "rope_theta": 10000.0, "rope_type": "dynamic"},
    ),
}


def v4_style_config_class():
    from transformers import PretrainedConfig

    class V4StyleConfig(PretrainedConfig):  # how DeepSeek-V2 / InternLM2 configs store their rotary settings
        model_type = "loadguard_v4_style"

        def __init__(self, rope_theta=10000.0, rope_scaling=None, **kwargs):
            self.rope_theta = rope_theta
            self.rope_scaling = rope_scaling
            super().__init__(**kwargs)

    return V4StyleConfig


# ----------------------------------------------------------------------------------------------------
# attention masks: every function, on a grid of inputs


def _masks(batch: int, length: int):
    yield torch.ones(batch, length, dtype=torch.long)
    left = torch.ones(batch, length, dtype=torch.long)
    left[0, : length // 2] = 0
    yield left
    right = torch.ones(batch, length, dtype=torch.long)
    right[-1, length - 1 :] = 0
    yield right
    yield torch.randint(0, 2, (batch, length), generator=torch.Generator().manual_seed(length))


GRID = list(itertools.product([torch.float32, torch.float16, torch.bfloat16], [1, 3], [1, 4], [0, 2], [None, 1, 3]))


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def _compare_masks(theirs) -> int:
    """Every function of ours against ``theirs`` (a module with the 4.x API); returns how many cases ran."""
    cases = 0
    for dtype, batch, query, past, window in GRID:
        embeds = torch.zeros(batch, query, 8, dtype=dtype)
        kv = query + past
        for name in ("AttentionMaskConverter",):
            for causal in (True, False):
                if not causal and window is not None:
                    continue
                a, b = getattr(ours, name)(causal, window), getattr(theirs, name)(causal, window)
                for mask in _masks(batch, kv):
                    if causal:
                        assert _same(a.to_causal_4d(batch, query, kv, dtype), b.to_causal_4d(batch, query, kv, dtype))
                    assert _same(
                        a.to_4d(mask, query, dtype, key_value_length=kv),
                        b.to_4d(mask, query, dtype, key_value_length=kv),
                    )
                    cases += 1
        for mask in _masks(batch, kv):
            for fn in ("_prepare_4d_causal_attention_mask", "_prepare_4d_causal_attention_mask_for_sdpa"):
                for given in (mask, None):
                    got = getattr(ours, fn)(given, (batch, query), embeds, past, window)
                    want = getattr(theirs, fn)(given, (batch, query), embeds, past, window)
                    assert _same(got, want), (fn, dtype, batch, query, past, window)
                    cases += 1
            for fn in ("_prepare_4d_attention_mask", "_prepare_4d_attention_mask_for_sdpa"):
                for target in (None, query):
                    assert _same(getattr(ours, fn)(mask, dtype, target), getattr(theirs, fn)(mask, dtype, target))
                    cases += 1
            expanded = theirs.AttentionMaskConverter._expand_mask(mask, dtype, query)
            lowest = torch.finfo(dtype).min
            assert _same(
                ours.AttentionMaskConverter._unmask_unattended(expanded, lowest),
                theirs.AttentionMaskConverter._unmask_unattended(expanded, lowest),
            )
            assert ours.AttentionMaskConverter._ignore_causal_mask_sdpa(
                mask, embeds, past, window
            ) == theirs.AttentionMaskConverter._ignore_causal_mask_sdpa(mask, embeds, past, window)
        four_d = torch.randint(0, 2, (batch, 1, query, kv), generator=torch.Generator().manual_seed(7)).to(dtype)
        got = ours._prepare_4d_causal_attention_mask(four_d, (batch, query), embeds, past)
        assert _same(got, theirs._prepare_4d_causal_attention_mask(four_d, (batch, query), embeds, past))
        assert _same(
            ours._create_4d_causal_attention_mask((batch, query), dtype, "cpu", past, window),
            theirs._create_4d_causal_attention_mask((batch, query), dtype, "cpu", past, window),
        )
        cases += 2
    return cases


native_mask_utils = pytest.mark.skipif(
    not registry.get("v4-attn-mask-utils").is_native(),
    reason=f"transformers {TRANSFORMERS_VERSION} has no transformers.modeling_attn_mask_utils to compare with (4.57 and 5.25+ do)",
)


@native_mask_utils
def test_attention_masks_equal_transformers_own():
    """Our stand-in against the module itself, where transformers ships it: 4.57, and 5.25's deprecated copy."""
    import transformers.modeling_attn_mask_utils as theirs

    assert set(ours.NAMES) <= set(dir(theirs))
    assert _compare_masks(theirs) > 1000
    with pytest.raises(ValueError, match="strictly positive"):
        ours.AttentionMaskConverter(True, 0)
    with pytest.raises(ValueError, match="Incorrect 4D attention_mask shape"):
        ours._prepare_4d_causal_attention_mask(torch.ones(1, 1, 2, 2), (1, 3), torch.zeros(1, 3, 4), 0)


def test_attention_masks_mean_what_they_say():
    """On any transformers: additive masks, 0 where attended, the dtype's minimum elsewhere."""
    lowest = torch.finfo(torch.float32).min
    causal = ours._prepare_4d_causal_attention_mask(None, (1, 3), torch.zeros(1, 3, 4), 0)
    assert torch.equal(causal[0, 0], torch.tensor([[0, lowest, lowest], [0, 0, lowest], [0, 0, 0]]))
    padded = ours._prepare_4d_causal_attention_mask(torch.tensor([[0, 1, 1]]), (1, 3), torch.zeros(1, 3, 4), 0)
    assert torch.equal(padded[0, 0, 2], torch.tensor([lowest, 0, 0]))
    window = ours._create_4d_causal_attention_mask((1, 4), torch.float32, "cpu", 0, sliding_window=2)
    assert torch.equal(window[0, 0, 3] == 0, torch.tensor([False, True, True, True]))  # 4.x: itself and 2 back
    assert ours._prepare_4d_attention_mask_for_sdpa(torch.ones(2, 5), torch.float32) is None
    assert ours._prepare_4d_causal_attention_mask(None, (1, 1), torch.zeros(1, 1, 4), 3) is None


@pytest.mark.skipif(
    registry.get("v4-attn-mask-utils").is_native(),
    reason=f"transformers {TRANSFORMERS_VERSION} has the module itself: no stand-in",
)
def test_the_shim_module_exists_only_inside_the_workaround():
    assert "transformers.modeling_attn_mask_utils" not in sys.modules
    with registry.using(["v4-attn-mask-utils"]) as outcomes:
        from transformers.modeling_attn_mask_utils import _prepare_4d_attention_mask

        assert _prepare_4d_attention_mask is ours._prepare_4d_attention_mask
    assert outcomes[0].status == "applied" and "_prepare_4d_attention_mask" in outcomes[0].detail
    assert "transformers.modeling_attn_mask_utils" not in sys.modules


# ----------------------------------------------------------------------------------------------------
# is_torch_fx_available


@needs_v4
def test_torch_fx_available_equals_transformers_4s():
    from transformers.utils import is_torch_fx_available as theirs

    assert is_torch_fx_available() == theirs() is True


@needs_v5
def test_torch_fx_available_is_provided_only_inside_the_workaround():
    import transformers.utils

    with registry.using(["v4-torch-fx-available"]) as outcomes:
        from transformers.utils import is_torch_fx_available as provided

        assert provided() is True
    assert outcomes[0].status == "applied"
    assert not hasattr(transformers.utils, "is_torch_fx_available")


# ----------------------------------------------------------------------------------------------------
# config.rope_scaling


@needs_v4
@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope_scaling_equals_transformers_4s(case):
    stored, standardized_by_v5 = ROPE_CASES[case]
    theirs = v4_style_config_class()(rope_scaling=stored).rope_scaling
    mine = v4_rope_scaling(standardized_by_v5)
    if theirs is None:
        assert mine is None
    else:  # every key 4.x had, with its value (5.x adds rope_theta and rope_type)
        assert {k: mine[k] for k in theirs} == theirs


@needs_v5
@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope_scaling_what_v5_standardizes_and_what_the_workaround_gives(case):
    stored, standardized = ROPE_CASES[case]
    config = v4_style_config_class()(rope_scaling=stored)
    assert config.rope_scaling == standardized  # the table the 4.57 leg compares against is 5.x's real behaviour
    with registry.using(["v4-rope-scaling"]):
        seen_by_model_code = config.rope_scaling
        # transformers' own code keeps 5.x's answer
        namespace = {"__name__": "transformers.loadguard_probe", "config": config}
        exec("def read():\n    return config.rope_scaling", namespace)
        seen_by_transformers = namespace["read"]()
    assert seen_by_model_code == v4_rope_scaling(standardized)
    assert seen_by_transformers == standardized
    assert config.rope_scaling == standardized  # and after the load


# ----------------------------------------------------------------------------------------------------
# generation defaults on configs


@needs_v4
def test_generation_defaults_equal_transformers_4s():
    from transformers import PretrainedConfig

    assert V4_GENERATION_DEFAULTS == PretrainedConfig._get_global_generation_defaults()
    config = PretrainedConfig()
    assert {name: getattr(config, name) for name in V4_GENERATION_DEFAULTS} == V4_GENERATION_DEFAULTS


@needs_v5
def test_generation_defaults_are_given_to_model_code_only_inside_the_workaround(zoo_folder):
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    assert not hasattr(config, "max_length")
    with registry.using(["v4-config-generation-defaults"], zoo_folder("v4_max_length")) as outcomes:
        assert {name: getattr(config, name) for name in V4_GENERATION_DEFAULTS} == V4_GENERATION_DEFAULTS
        namespace = {"__name__": "transformers.loadguard_probe", "config": config}
        exec("def probe():\n    return hasattr(config, 'max_length')", namespace)
        assert namespace["probe"]() is False  # transformers' own code still sees 5.x configs
        config.max_length = 7  # a value set on the config wins
        assert config.max_length == 7
    assert outcomes[0].status == "applied"
    assert "max_length" not in PretrainedConfig.__dict__


# ----------------------------------------------------------------------------------------------------
# LlamaFlashAttention2


def test_llama_attention_classes_become_llama_attention():
    """4.57 has no LlamaFlashAttention2 either: the workaround applies on both lines, and the class it gives is
    the one attention class that serves every kernel."""
    import transformers.models.llama.modeling_llama as llama

    with registry.using(["v4-llama-attention-classes"]) as outcomes:
        from transformers.models.llama.modeling_llama import LlamaFlashAttention2, LlamaSdpaAttention

        assert LlamaFlashAttention2 is llama.LlamaAttention and LlamaSdpaAttention is llama.LlamaAttention
    assert outcomes[0].status == "applied"
    assert "LlamaFlashAttention2" not in llama.__dict__ and "__getattr__" not in llama.__dict__


# ----------------------------------------------------------------------------------------------------
# the API-diff families, against 4.57's own objects


@needs_v4
def test_model_attribute_stand_ins_equal_4_57s():
    from transformers import BertConfig, BertModel

    from loadguard.workarounds import v4_api

    torch.manual_seed(0)
    model = BertModel(
        BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    )
    decoder = BertModel(
        BertConfig(
            vocab_size=32,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            is_decoder=True,
        )
    )
    for mask in (torch.tensor([[1, 1, 0, 1]]), torch.randint(0, 2, (3, 5)), torch.randint(0, 2, (2, 4, 4))):
        shape = mask.shape[:2]
        for owner in (model, decoder):
            assert torch.equal(
                v4_api.get_extended_attention_mask(owner, mask, shape), owner.get_extended_attention_mask(mask, shape)
            )
        assert torch.equal(v4_api.invert_attention_mask(model, mask), model.invert_attention_mask(mask))
    for head_mask in (None, torch.rand(2), torch.rand(2, 2)):
        ours, theirs = v4_api.get_head_mask(model, head_mask, 2), model.get_head_mask(head_mask, 2)
        assert ours == theirs if head_mask is None else torch.equal(ours, theirs)
    inputs = {"input_ids": torch.ones(2, 7, dtype=torch.long)}
    assert v4_api.floating_point_ops(model, inputs) == model.floating_point_ops(inputs)
    assert v4_api.V4_MODEL_ATTRIBUTES["framework"].fget(model) == model.framework


@needs_v4
def test_config_defaults_are_4_57s():
    from transformers import PretrainedConfig

    from loadguard.workarounds.v4_api import v4_config_defaults

    probe = PretrainedConfig()
    assert v4_config_defaults() and all(getattr(probe, name) == value for name, value in v4_config_defaults().items())


@needs_v4
def test_module_name_origins_are_4_57s_own_objects():
    """For every re-exported name of the diff, the object its recorded origin names is, in 4.57, the very object the
    module held: what v4-module-names hands back on 5.x is what 4.57 had (where 5.x still has it)."""
    import importlib
    import warnings

    from loadguard.workarounds import v4_names

    checked = wrong = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module, names in v4_names.removed().items():
            try:
                held = vars(importlib.import_module(module))
            except Exception:
                continue
            for name, origin in names.items():
                if origin is None or origin.startswith("value:") or name not in held:
                    continue
                try:
                    value = v4_names._resolve(origin)
                except Exception:
                    continue
                checked += 1
                wrong += value is not held[name]
    assert checked > 1500 and wrong == 0


@needs_v4
def test_pruning_stand_ins_equal_4_57s():
    from transformers import pytorch_utils as theirs

    from loadguard.workarounds import v4_standins as ours

    for heads, pruned in (([0, 2], {2}), ([1], set()), ([3, 0], {1})):
        a, b = (
            ours.find_pruneable_heads_and_indices(heads, 4, 3, pruned),
            theirs.find_pruneable_heads_and_indices(heads, 4, 3, pruned),
        )
        assert a[0] == b[0] and torch.equal(a[1], b[1])
    layer = torch.nn.Linear(5, 6)
    for dim, index in ((0, torch.tensor([0, 4, 5])), (1, torch.tensor([1, 2]))):
        a, b = ours.prune_linear_layer(layer, index, dim), theirs.prune_linear_layer(layer, index, dim)
        assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)


# ----------------------------------------------------------------------------------------------------
# ROPE_INIT_FUNCTIONS["default"] (v4 behaviour: a registry key 5.x dropped)

ROPE_DEFAULT_CASES = {
    "plain": {"hidden_size": 64, "num_attention_heads": 4},
    "theta": {"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 500000.0},
    "head_dim": {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 32},
    "partial": {"hidden_size": 64, "num_attention_heads": 4, "partial_rotary_factor": 0.5},
}


def _rope_config(fields):
    config = v4_style_config_class()(rope_theta=fields.get("rope_theta", 10000.0))
    for key, value in fields.items():
        setattr(config, key, value)
    return config


@needs_v4
@pytest.mark.parametrize("case", ROPE_DEFAULT_CASES)
def test_default_rope_parameters_equal_transformers_4s(case):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from loadguard.workarounds.v4_behaviour import v4_default_rope_parameters

    config = _rope_config(ROPE_DEFAULT_CASES[case])
    theirs, their_factor = ROPE_INIT_FUNCTIONS["default"](config, None)
    mine, my_factor = v4_default_rope_parameters(config, None)
    assert torch.equal(mine, theirs) and my_factor == their_factor == 1.0


@needs_v5
def test_rope_default_key_is_given_to_code_imported_inside_the_workaround_only():
    import transformers.modeling_rope_utils as rope_utils
    from transformers import modeling_utils

    original = rope_utils.ROPE_INIT_FUNCTIONS
    assert "default" not in original
    with registry.using(["v4-rope-init-default"]) as outcomes:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS as seen

        inv_freq, factor = seen["default"](_rope_config(ROPE_DEFAULT_CASES["theta"]), None)
        assert factor == 1.0 and torch.allclose(inv_freq, 1.0 / 500000.0 ** (torch.arange(0, 16, 2).float() / 16))
        assert seen.get("default") is not None and seen.get("nope") is None
        assert modeling_utils.ROPE_INIT_FUNCTIONS is original  # transformers' own code keeps 5.x's registry
    assert outcomes[0].status == "applied" and rope_utils.ROPE_INIT_FUNCTIONS is original
    # 5.x keeps rope_theta in rope_parameters: read from there as 4.x read config.rope_theta
    from types import SimpleNamespace

    from loadguard.workarounds.v4_behaviour import v4_default_rope_parameters

    v5_config = SimpleNamespace(
        hidden_size=64, num_attention_heads=4, rope_parameters={"rope_theta": 500000.0, "rope_type": "default"}
    )
    assert torch.equal(v4_default_rope_parameters(v5_config, None)[0], inv_freq)


# ----------------------------------------------------------------------------------------------------
# attention-support probes (v4 behaviour: read on the class before construction, not on the instance during it)


def _probing_wrapper():
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel

    class ProbeConfig(PretrainedConfig):
        model_type = "loadguard_probe"

    class Inner(PreTrainedModel):
        config_class = ProbeConfig
        _supports_sdpa = True

        def __init__(self, config):
            super().__init__(config)
            self.proj = nn.Linear(2, 2)
            self.post_init()

    class Wrapper(PreTrainedModel):  # as TinyLLaVA / Prismatic / Florence-2 remote code declares it
        config_class = ProbeConfig

        def __init__(self, config):
            super().__init__(config)
            self.language_model = Inner(config)
            self.post_init()

        @property
        def _supports_sdpa(self):
            return self.language_model._supports_sdpa

    Wrapper.__module__ = Inner.__module__ = "transformers_modules.probe.modeling_probe"  # remote code
    return Wrapper, ProbeConfig


def test_a_probe_property_fails_during_construction_without_the_workaround():
    wrapper, config = _probing_wrapper()
    with pytest.raises(AttributeError, match="has no attribute '_supports_sdpa'"):
        wrapper(config())
    error = AttributeError("'Wrapper' object has no attribute '_supports_sdpa'")
    assert "v4-attention-probe" in [w.name for w in registry.matching(error)]


def test_a_probe_property_answers_as_its_class_did_then_asks_its_submodule():
    wrapper, config = _probing_wrapper()
    with registry.using(["v4-attention-probe"]) as outcomes:
        model = wrapper(config())
    assert outcomes[0].status == "applied"
    # 4.4x read the class attribute (the property object, truthy): SDPA chosen, as the wrapped model supports it
    assert bool(wrapper.__dict__["_supports_sdpa"]) and model.config._attn_implementation == "sdpa"
    assert model._supports_sdpa is True  # constructed: the property asks its submodule again
    assert isinstance(wrapper.__dict__["_supports_sdpa"], property)  # the class is as it was
