"""v4 code in generate (issue 46): ``v4-generate-hooks`` gives ``_extract_past_from_model_output`` back with the
meaning of the 4.x a model was written for, ``v4-cache-layer-count`` gives a config without ``num_hidden_layers`` no
default cache; each has a source fix that ``loadguard fix`` writes, and neither touches a model that does not need it."""

from __future__ import annotations

import pytest
import torch

import loadguard
from loadguard import zoo
from loadguard._hf import model_inputs, model_outputs
from loadguard.workarounds import v4_generate
from loadguard.workarounds.api_coverage import coverage

from ..conftest import IS_V5

v5_only = pytest.mark.skipif(not IS_V5, reason="transformers 4.x still has what these give back")


def _greedy_by_forward(model, ids: torch.Tensor, steps: int) -> list[int]:
    """Greedy tokens from plain forward passes over the whole sequence (no generate, no cache): the reference."""
    tokens = []
    with torch.no_grad():
        for _ in range(steps):
            step = int(
                model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0, -1].argmax()
            )
            tokens.append(step)
            ids = torch.cat([ids, torch.tensor([[step]])], dim=1)
    return tokens


@v5_only
def test_generate_meets_both_on_transformers_5_and_runs_with_both(zoo_folder):
    folder = zoo_folder("v4_generate_hooks")
    plain = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True).eval()
    crash = model_outputs(plain, fixes=loadguard.workarounds.fixes_for)["error"]
    first, *_ = zoo.get("v4_generate_hooks").runs_into
    assert (crash["stage"], f"{crash['type']}: {crash['message']}", crash["fixes"]) == (first[1], first[2], [first[0]])

    model = loadguard.load(
        "AutoModelForCausalLM",
        folder,
        trust_remote_code=True,
        workarounds=["v4-cache-layer-count", "v4-generate-hooks", "v4-generate-attention-mask"],
    ).eval()
    ran = model_outputs(model)
    assert ran["error"] is None and len(ran["tokens"]) == 8
    built, _ = model_inputs(model)
    assert ran["tokens"] == _greedy_by_forward(model, built["input_ids"][:1], 8)


def test_the_hook_answers_as_the_release_the_model_was_written_for():
    class Output(dict):
        logits = torch.zeros(1, 1, 4)

    class Model:
        def forward(self, input_ids, past_key_values=None):
            return None

    past = (torch.tensor(3),)
    assert v4_generate.past_from_model_output(Model(), Output(cache=past)) is past  # 5.25 renamed the field
    assert (
        v4_generate.past_from_model_output(Model(), Output(past_key_values=past), standardize_cache_format=True)
        is past
    )
    named, got = v4_generate.named_past_from_model_output(Model(), Output(past_key_values=past))
    assert (named, got) == ("past_key_values", past)
    assert "return past_key_values" in v4_generate.hook_helpers({"transformers_version": "4.30.2"})[v4_generate.HOOK]
    later = v4_generate.hook_helpers({"transformers_version": "4.44.2"})[v4_generate.HOOK]
    assert "return cache_name, _v4_past_from_model_output(self, outputs, *args, **kwargs)" in later
    assert "def _v4_past_from_model_output(" in later


def test_the_source_fixes_edit_only_what_needs_them():
    hooks = loadguard.workarounds.get("v4-generate-hooks")
    layers = loadguard.workarounds.get("v4-cache-layer-count")
    calling = {
        "modeling_x.py": "class XForCausalLM(XPreTrainedModel):\n"
        "    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):\n"
        "        return {'input_ids': input_ids}\n\n"
        "    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, **kwargs):\n"
        "        model_kwargs['past_key_values'] = self._extract_past_from_model_output(outputs)\n"
        "        return model_kwargs\n",
        "configuration_x.py": "class XConfig(PretrainedConfig):\n    def __init__(self, num_layers=2, **kw):\n"
        "        self.num_layers = num_layers\n        super().__init__(**kw)\n",
    }
    edited, _ = hooks.source_fix(calling, {"transformers_version": "4.30.2"}, None)
    assert "_v4_extract_past_from_model_output(self, outputs)" in edited["modeling_x.py"]
    edited, _ = layers.source_fix(calling, {"num_layers": 2}, None)
    assert (
        list(edited) == ["modeling_x.py"] and "def _supports_default_dynamic_cache(self):" in edited["modeling_x.py"]
    )
    compile(edited["modeling_x.py"], "modeling_x.py", "exec")
    # a config that says its layer count (in config.json, or mapped in its class) needs no change
    assert layers.source_fix(calling, {"num_hidden_layers": 2}, None)[0] == {}
    mapped = {
        **calling,
        "configuration_x.py": calling["configuration_x.py"].replace(
            "class XConfig(PretrainedConfig):\n",
            "class XConfig(PretrainedConfig):\n    attribute_map = {'num_hidden_layers': 'num_layers'}\n",
        ),
    }
    assert layers.source_fix(mapped, {"num_layers": 2}, None)[0] == {}
    assert hooks.source_fix({"modeling_y.py": "x = 1\n"}, {}, None)[0] == {}


@v5_only
def test_a_model_whose_config_counts_its_layers_is_left_alone(zoo_folder):
    """np_buffer says num_hidden_layers: neither workaround patches it, and both say they were not used."""
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("np_buffer"),
        trust_remote_code=True,
        workarounds=["v4-cache-layer-count", "v4-generate-hooks"],
        on_problem="repair",
    )
    assert "_supports_default_dynamic_cache" not in vars(type(model))
    assert not hasattr(type(model), v4_generate.HOOK)


def test_the_api_diff_entry_is_covered_by_the_workaround():
    assert coverage("model:GenerationMixin._extract_past_from_model_output") == ("covered", "v4-generate-hooks")
    assert coverage("model:PreTrainedModel._extract_past_from_model_output") == ("covered", "v4-generate-hooks")


def test_the_mask_is_restored_only_in_hooks_that_use_it_unchecked():
    mask = loadguard.workarounds.get("v4-generate-attention-mask")
    sources = {
        "modeling_m.py": "class M(P):\n"
        "    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):\n"
        "        attention_mask = kwargs['attention_mask'].bool()\n"
        "        return {'input_ids': input_ids, 'attention_mask': attention_mask}\n\n"
        "    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, **kwargs):\n"
        '        """Grow the mask."""\n'
        "        if 'attention_mask' in model_kwargs:\n"
        "            m = model_kwargs['attention_mask']\n"
        "            model_kwargs['attention_mask'] = torch.cat([m, m.new_ones((m.shape[0], 1))], dim=-1)\n"
        "        return model_kwargs\n",
        "modeling_checked.py": "class C(P):\n"
        "    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):\n"
        "        if attention_mask is not None:\n"
        "            attention_mask = attention_mask.bool()\n"
        "        return {'input_ids': input_ids}\n",
    }
    edited, _ = mask.source_fix(sources, {}, None)
    assert list(edited) == ["modeling_m.py"]  # a hook that tests the mask against None is left as written
    text = edited["modeling_m.py"]
    assert 'if kwargs.get("attention_mask", 0) is None:' in text
    assert 'kwargs["attention_mask"] = input_ids.new_ones(input_ids.shape[:2])' in text
    assert text.index('"""Grow the mask."""') < text.index('del model_kwargs["attention_mask"]')  # after the docstring
    compile(text, "modeling_m.py", "exec")


CONFIG_FILE = (
    "from transformers import PretrainedConfig\n\n\n"
    "class GlmConfig(PretrainedConfig):\n"
    "    model_type = 'glm_use_cache_test'\n\n"
    "    def __init__(self, num_layers=2, **kwargs):\n"
    "        self.num_layers = num_layers\n"
    "        super().__init__(**kwargs)\n"
)


def test_use_cache_is_kept_as_config_json_gave_it():
    """v4-config-use-cache: transformers 5 takes use_cache off a config class that does not set it (4.x kept it): the
    source fix keeps it; a class that sets it itself, or a config.json without it, is left as written."""
    keep = loadguard.workarounds.get("v4-config-use-cache")
    edited, _ = keep.source_fix({"configuration_glm.py": CONFIG_FILE}, {"use_cache": True}, None)
    namespace: dict = {}
    exec(compile(edited["configuration_glm.py"], "configuration_glm.py", "exec"), namespace)
    assert namespace["GlmConfig"](use_cache=True).use_cache is True
    assert namespace["GlmConfig"](use_cache=False).use_cache is False
    assert keep.source_fix({"configuration_glm.py": CONFIG_FILE}, {}, None)[0] == {}
    sets = CONFIG_FILE.replace(
        "        self.num_layers = num_layers\n", "        self.use_cache = kwargs.pop('use_cache', True)\n"
    )
    assert keep.source_fix({"configuration_glm.py": sets}, {"use_cache": True}, None)[0] == {}


@v5_only
def test_transformers_5_drops_use_cache_and_the_workaround_keeps_it(tmp_path):
    from transformers import PretrainedConfig

    assert not hasattr(PretrainedConfig(use_cache=True), "use_cache")  # what the workaround answers
    assert not loadguard.workarounds.get("v4-config-use-cache").is_native()
