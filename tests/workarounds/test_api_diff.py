"""The API diff (transformers 4.57 -> the pinned 5.x) as data: every entry is given back by a workaround or declined
with the reason, and what the workarounds claim to give back, they give back."""

from __future__ import annotations

import importlib
import shutil
import warnings

import pytest

from loadguard import workarounds as registry
from loadguard.workarounds import api_coverage, v4_names

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} is the diff's old side: nothing is missing here"
)


def test_the_diff_is_of_the_pinned_release():
    diff = v4_names.diff()
    assert diff["from"] == "4.57.6" and len(diff["entries"]) > 9000
    if IS_V5:  # a bump without `make api-diff` leaves the new release's changes unaccounted for
        assert diff["to"] == TRANSFORMERS_VERSION, (
            f"the API diff is of {diff['to']}: run `make api-diff` for {TRANSFORMERS_VERSION}"
        )


def test_the_diff_holds_names_older_4x_releases_had():
    """Code written for 4.36 imports what 4.57 had already dropped; the diff lists it with the newest release that
    had it, and keeps 4.57's own entries unmarked."""
    entries = {e["id"]: e for e in v4_names.diff()["entries"]}
    assert v4_names.diff()["older"][0] == "4.26.1" and "4.54.1" in v4_names.diff()["older"]
    assert entries["name:transformers.models.llama.modeling_llama:_expand_mask"]["last_in"] == "4.36.2"
    assert entries["name:transformers.models.llama.modeling_llama:LlamaFlashAttention2"]["last_in"] == "4.46.3"
    assert "last_in" not in entries["name:transformers.pytorch_utils:find_pruneable_heads_and_indices"]
    assert entries["model:PreTrainedModel._greedy_search"]["via"] == "GenerationMixin"
    assert "module:transformers.onnx" in entries and "name:transformers:TFPreTrainedModel" in entries
    assert not any(e.startswith("signature:") and "last_in" in entries[e] for e in entries)


@needs_v5
def test_lazy_top_level_and_older_names_are_classified():
    assert api_coverage.coverage("module:transformers.onnx") == ("covered", "v4-onnx-module")
    assert api_coverage.coverage("name:transformers:TFPreTrainedModel")[1].startswith("a TensorFlow or Flax class")
    assert api_coverage.coverage("name:transformers:CLIPFeatureExtractor") == ("covered", "v4-module-names")
    assert "name:transformers:LlamaTokenizerFast" not in {e["id"] for e in v4_names.diff()["entries"]}  # 5.x has it
    assert api_coverage.coverage("name:transformers.models.llama.modeling_llama:LlamaFlashAttention2") == (
        "covered",
        "v4-llama-attention-classes",  # its own workaround, not v4-module-names too
    )
    assert api_coverage.coverage("name:transformers.models.mistral.modeling_mistral:MistralFlashAttention2") == (
        "covered",
        "v4-module-names",
    )
    assert api_coverage.coverage("model:PreTrainedModel._greedy_search")[0] == "declined"
    assert api_coverage.coverage("module:transformers.models.nezha.modeling_nezha")[0] == "declined"


@needs_v5
def test_top_level_renames_mean_the_5x_class(zoo_folder):
    import transformers

    with registry.using(["v4-module-names"], zoo_folder("clean")):
        from transformers import CLIPFeatureExtractor
        from transformers.modeling_rope_utils import _compute_default_rope_parameters
        from transformers.models.mistral.modeling_mistral import MistralFlashAttention2
    assert CLIPFeatureExtractor is transformers.CLIPImageProcessor
    assert MistralFlashAttention2 is transformers.models.mistral.modeling_mistral.MistralAttention
    assert v4_names.fallback("transformers", "CLIPFeatureExtractor", None) == (
        "from transformers import CLIPImageProcessor as CLIPFeatureExtractor"
    )
    assert v4_names.fallback("transformers", "TFPreTrainedModel", None) is None
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4)
    inv_freq, factor = _compute_default_rope_parameters(config)
    assert factor == 1.0 and inv_freq.shape == (8,) and float(inv_freq[1]) == pytest.approx(10000 ** (-2 / 16))
    with pytest.raises(ImportError):
        from transformers import CLIPFeatureExtractor  # noqa: F401,F811  (only inside the workaround)


@needs_v5
def test_every_entry_is_covered_or_declined_with_a_reason():
    tally = api_coverage.tally()
    assert tally["uncovered"] == []
    assert set(tally["covered"]) <= set(registry.REGISTRY)  # covered by workarounds that exist
    assert tally["covered"]["v4-module-names"] > 6000 and tally["declined"] > 2000
    for entry in v4_names.diff()["entries"]:
        state, what = api_coverage.coverage(entry["id"])
        assert what, entry  # a workaround's name, or a reason


@needs_v5
def test_every_name_the_workaround_claims_is_given_back(zoo_folder):
    """Under v4-module-names, `from <module> import <name>` works for every name entry it covers (all ~6,600)."""
    covered = [
        e["id"] for e in v4_names.diff()["entries"] if api_coverage.coverage(e["id"]) == ("covered", "v4-module-names")
    ]
    failed = []
    with warnings.catch_warnings(), registry.using(["v4-module-names"], zoo_folder("clean")):
        warnings.simplefilter("ignore")
        for entry_id in covered:
            kind, module, name = (entry_id.split(":", 2) + [""])[:3]
            try:
                getattr(importlib.import_module(module), name) if kind == "name" else importlib.import_module(module)
            except Exception as error:
                failed.append(f"{entry_id}: {type(error).__name__}: {error}")
    assert failed == []
    assert not hasattr(
        importlib.import_module("transformers.pytorch_utils"), "find_pruneable_heads_and_indices"
    )  # only inside


@needs_v5
def test_the_stand_ins_mean_what_4x_meant():
    import torch

    from loadguard.workarounds.v4_standins import find_pruneable_heads_and_indices, prune_linear_layer

    heads, index = find_pruneable_heads_and_indices([0, 2], n_heads=4, head_size=3, already_pruned_heads={2})
    assert heads == {0} and index.tolist() == [3, 4, 5, 6, 7, 8, 9, 10, 11]
    layer = torch.nn.Linear(4, 6)
    pruned = prune_linear_layer(layer, torch.tensor([1, 3]), dim=0)
    assert (
        pruned.weight.shape == (2, 4)
        and torch.equal(pruned.weight, layer.weight[[1, 3]])
        and torch.equal(pruned.bias, layer.bias[[1, 3]])
    )


@needs_v5
def test_older_private_mask_helpers_of_native_modules(zoo_folder):
    """`from transformers.models.bloom.modeling_bloom import _expand_mask` (and _make_causal_mask, in any native model
    module): helpers from before 4.57 that remote code still imports; Bloom's are boolean, the others additive."""
    import torch

    from loadguard.workarounds.v4_names import _removed_names_pattern

    error = ImportError("cannot import name '_expand_mask' from 'transformers.models.bloom.modeling_bloom' (/x.py)")
    assert [w.name for w in registry.matching(error)] == [
        "v4-module-names"
    ] and "_expand_mask" in _removed_names_pattern()
    with registry.using(["v4-module-names"], zoo_folder("clean")):
        from transformers.models.bloom.modeling_bloom import _expand_mask as bloom_expand
        from transformers.models.bloom.modeling_bloom import _make_causal_mask as bloom_causal
        from transformers.models.llama.modeling_llama import _expand_mask, _make_causal_mask
    padded = bloom_expand(torch.tensor([[1, 1, 0]]), 2)
    assert (
        padded.dtype == torch.bool
        and padded.shape == (1, 1, 2, 3)
        and padded[0, 0, 0].tolist() == [False, False, True]
    )
    assert bloom_causal((1, 3), "cpu", 1)[0, 0].tolist() == [
        [False, False, True, True],
        [False, False, False, True],
        [False, False, False, False],
    ]
    lowest = torch.finfo(torch.float32).min
    assert _expand_mask(torch.tensor([[1, 0]]), torch.float32)[0, 0, 0].tolist() == [0.0, lowest]
    assert _make_causal_mask((1, 2), torch.float32, "cpu")[0, 0].tolist() == [[0.0, lowest], [0.0, 0.0]]
    with pytest.raises(ImportError):
        from transformers.models.bloom.modeling_bloom import _expand_mask  # noqa: F401  (only inside the workaround)


def test_the_diff_finds_what_vanished_whole_and_what_star_imports_lost():
    """A module 4.x's objects lived in that 5.x removed whole (found from where the dumped names' objects lived, not
    from a list), and the names a star import of a native module brought on 4.x that 5.x's ``__all__`` leaves out."""
    entries = {e["id"]: e for e in v4_names.diff()["entries"]}
    vanished = entries["module:transformers.utils.model_parallel_utils"]
    assert vanished["vanished"] and vanished["origin_of"].endswith((":assert_device_map", ":get_device_map"))
    assert "BartConfig" in entries["star:transformers.models.bart.modeling_bart"]["lost"]
    assert "BertEmbeddings" in entries["star:transformers.models.bert.modeling_bert"]["lost"]
    for removed in (
        "name:transformers.utils:LossKwargs",
        "name:transformers.cache_utils:HybridCache",
        "name:transformers.pytorch_utils:prune_conv1d_layer",
        "name:transformers:top_k_top_p_filtering",
    ):
        assert removed in entries, removed
    if IS_V5:
        assert api_coverage.coverage("module:transformers.utils.model_parallel_utils") == (
            "covered",
            "v4-module-names",
        )
        assert api_coverage.coverage("star:transformers.models.bart.modeling_bart") == ("covered", "v4-star-imports")


@needs_v5
def test_a_star_import_under_the_workaround_brings_what_4x_brought(zoo_folder, tmp_path):
    """What the diff lists as lost for BART's and BERT's modeling modules, a star import gives back while
    v4-star-imports is active (the model's code star-imports them), and only then."""
    entries = {e["id"]: e for e in v4_names.diff()["entries"]}
    folder = tmp_path / "star"
    shutil.copytree(zoo_folder("clean"), folder)
    modules = ("transformers.models.bart.modeling_bart", "transformers.models.bert.modeling_bert")
    (folder / "uses_stars.py").write_text("".join(f"from {m} import *\n" for m in modules))
    for module in modules:
        with registry.using(["v4-star-imports"], folder):
            brought: dict = {}
            exec(f"from {module} import *", brought)
        assert set(entries[f"star:{module}"]["lost"]) <= set(brought), module
        outside: dict = {}
        exec(f"from {module} import *", outside)
        assert not set(entries[f"star:{module}"]["lost"]) & set(outside)
