"""Proof (c) of ``loadguard fix``: the patched copy on transformers 5 answers as the original did on 4.x (logits within
the dtype's tolerance, the same greedy tokens, on inputs built from the config), and v4 code that only breaks past the
load (in ``forward``, in ``generate``) is found, given its source fix, and proven by (c)."""

from __future__ import annotations

import pytest
import torch

import loadguard
from loadguard._fix.across import compare_outputs, same_outputs
from loadguard._hf import describe_crash, model_inputs, model_outputs, token_ids, tokenized

from ..conftest import TRANSFORMERS_VERSION
from .test_fix import digest, independent_check, v5_only


@pytest.fixture
def compat(compat_cache, monkeypatch):
    """fix's 4.57 proofs run in the session's cached environment."""
    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))


def side(values=None, tokens=(1, 2, 3), **extra):
    values = torch.zeros(2, 4, 8) if values is None else values
    return {
        "inputs": ["attention_mask", "input_ids"],
        "dtype": "float32",
        "missing": [],
        "kind": "logits",
        "values": values,
        "tokens": list(tokens) if tokens is not None else None,
        "generate": "",
        "error": None,
        "part": "",
        **extra,
    }


def logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(seed)) * 3


def test_equal_outputs_pass_and_say_what_was_compared():
    ok, detail, measured = compare_outputs(side(logits()), side(logits()), "4.57.6", "5.25.0")
    assert ok is True
    assert (measured["max_abs_diff"], measured["tolerance"], measured["positions"]) == (0.0, 1e-4, 8)
    assert "its 3 greedy tokens are the same (1, 2, 3)" in detail and "4.57.6" in detail and "5.25.0" in detail


def test_logits_beyond_the_dtype_tolerance_fail_with_the_largest_difference():
    moved = logits().clone()
    moved[1, 2, 5] += 0.01  # one logit, far under any argmax change
    ok, detail, measured = compare_outputs(side(logits()), side(moved), "4.57.6", "5.25.0")
    assert ok is False and 1e-3 < measured["max_abs_diff"] < 1e-2
    assert "log-probabilities differ by up to" in detail and "(> 0.0001 for float32)" in detail
    # the same difference in bfloat16 is within its tolerance
    ok, _, measured = compare_outputs(side(logits()), side(moved, dtype="bfloat16"), "4.57.6", "5.25.0")
    assert ok is True and measured["tolerance"] == 5e-2


def test_a_different_argmax_fails_the_top_k_check_too():
    ranked = torch.arange(32.0).repeat(2, 4, 1)  # every position: token 31 first, then 30, ...
    flipped = ranked.clone()
    flipped[0, 1] = flipped[0, 1].flip(0)  # one position chooses token 0, outside the other's top 5
    ok, detail, _ = compare_outputs(side(ranked), side(flipped), "4.57.6", "5.25.0")
    assert ok is False and "top-5 logprobs disagree: Test0: at position 1:" in detail


def test_different_greedy_tokens_fail_and_name_the_position():
    ok, detail, measured = compare_outputs(
        side(logits(), tokens=(5, 6, 7)), side(logits(), tokens=(5, 9, 7)), "4.57.6", "5.25.0"
    )
    assert ok is False and "greedy tokens differ from position 1: [5, 9, 7] on 5.25.0, [5, 6, 7] on 4.57.6" in detail
    assert (measured["tokens_original"], measured["tokens_patched"]) == ([5, 6, 7], [5, 9, 7])


def test_non_finite_outputs_of_the_patched_copy_fail():
    nan = logits().clone()
    nan[0, 0, 0] = float("nan")
    ok, detail, _ = compare_outputs(side(logits()), side(nan), "4.57.6", "5.25.0")
    assert ok is False and "hold NaN or Inf" in detail and "the original's on 4.57.6: finite" in detail


def test_a_crash_of_the_patched_copy_fails_with_its_line_and_the_api_it_called():
    crash = {
        "stage": "generate",
        "type": "AttributeError",
        "message": "type object 'DynamicCache' has no attribute 'from_legacy_cache'",
        "line": "modeling_x.py:41",
        "missing": "from_legacy_cache",
        "fixes": ["v4-legacy-cache"],
    }
    ok, detail, _ = compare_outputs(side(logits()), side(logits(), tokens=None, error=crash), "4.57.6", "5.25.0")
    assert ok is False
    assert detail == f"on transformers 5.25.0 the patched copy's {describe_crash(crash)}"
    assert "generate raised AttributeError at modeling_x.py:41" in detail
    assert "(it calls from_legacy_cache, which this transformers does not have); workaround v4-legacy-cache" in detail


def test_nothing_to_compare_against_is_said_never_passed():
    crash = {"stage": "forward", "type": "ValueError", "message": "bad", "line": "", "missing": "", "fixes": []}
    ok, detail, _ = compare_outputs(side(error=crash), side(logits()), "4.57.6", "5.25.0")
    assert (
        ok is None and detail == "not compared: on transformers 4.57.6 the original's forward raised ValueError: bad"
    )
    ok, detail, _ = compare_outputs(side(missing=["data"]), side(missing=["data"]), "4.57.6", "5.25.0")
    assert ok is None and detail == "not compared: its forward requires data, which cannot be built from its config"
    proof = same_outputs(None, side(), "4.57.6", "5.25.0")
    assert (proof.ok, proof.detail) == (
        None,
        "not run: proof (b) took no outputs of the original on transformers 4.57.6",
    )
    proof = same_outputs(side(not_built="9 parameters are too many"), side(), "4.57.6", "5.25.0", weightless=True)
    assert (proof.ok, proof.weightless, proof.detail) == (
        None,
        True,
        "not run: without weights, 9 parameters are too many",
    )


def test_token_ids_avoid_every_id_the_config_reserves():
    class Config:
        vocab_size = 16
        pad_token_id = 3
        eos_token_id = [4, 5]
        image_token_index = 10

    ids = token_ids(Config(), batch=2, length=8)
    assert ids.shape == (2, 8) and ids.dtype == torch.long
    assert not set(ids.flatten().tolist()) & {3, 4, 5, 10} and int(ids.max()) < 16
    assert torch.equal(ids, token_ids(Config(), batch=2, length=8))  # the same on every call, every release


def test_inputs_are_built_for_what_the_forward_requires_and_the_rest_is_named():
    class Config:
        vocab_size = 32
        image_size = 14
        num_channels = 3

    class Vlm(torch.nn.Module):
        config = Config()

        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(2, 2)

        def forward(self, input_ids, pixel_values, attention_mask=None, use_cache=None):
            return input_ids

    built, missing = model_inputs(Vlm())
    assert sorted(built) == ["attention_mask", "input_ids", "pixel_values", "use_cache"] and missing == []
    assert built["pixel_values"].shape == (2, 3, 14, 14) and built["use_cache"] is False

    class Needs(Vlm):
        def forward(self, data, input_ids=None):
            return data

    built, missing = model_inputs(Needs())
    assert missing == ["data"] and model_outputs(Needs())["generate"].startswith("not run: the forward's required")


@v5_only
def test_v4_code_past_the_load_is_found_fixed_and_proven_by_its_outputs(zoo_folder, compat, tmp_path):
    """Both load on transformers 5 and break only when run: get_head_mask in forward, the legacy cache conversions in
    generate. The copy fix writes runs both on plain transformers 5 and answers as the original did on 4.57 (a copy
    that only passed (a) and (b) crashed there)."""
    from transformers import AutoModelForCausalLM

    for entry, workaround, stage in (
        ("v4_forward_api", "v4-model-attributes", "forward"),
        ("v4_legacy_cache", "v4-legacy-cache", "generate"),
    ):
        folder = zoo_folder(entry)
        before = digest(folder)
        # the original, its tensors repaired in memory, still breaks on transformers 5 when it runs
        original = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True).eval()
        seen = model_outputs(original, fixes=loadguard.workarounds.fixes_for)
        assert (seen["error"]["stage"], seen["error"]["type"], seen["error"]["fixes"]) == (
            stage,
            "AttributeError",
            [workaround],
        )
        out = tmp_path / f"{entry}-fixed"
        result = loadguard.fix(folder, out, trust_remote_code=True)
        assert result.status == "fixed" and workaround in result.workarounds, result.to_json()
        assert [(p.name, p.ok) for p in result.proofs if p.transformers] == [
            ("loads_right", True),
            ("saves_and_reloads", True),
            ("unchanged_before_v5", True),
            ("same_outputs", True),
        ]
        measured = result.proof("same_outputs").measured
        assert measured["tokens_patched"] == measured["tokens_original"] and len(measured["tokens_patched"]) == 8
        assert any(c.workaround == workaround for c in result.changes)
        assert independent_check(out, entry) == [] and digest(folder) == before
        fixed = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
        ran = model_outputs(fixed, ids=tokenized(str(out)))  # the prompt proof (c) ran on: its own tokenizer's
        assert ran["error"] is None and ran["tokens"] == measured["tokens_patched"]
        assert (
            f"transformers {TRANSFORMERS_VERSION} vs 4.57.6, same outputs: passed"
            in (out / "LOADGUARD_FIX.md").read_text()
        )


@v5_only
def test_a_copy_that_runs_differently_on_5x_is_not_fixed_and_says_where(zoo_folder, compat, tmp_path):
    """v4 code past the load that no workaround knows: the patched copy loads right (a) and is unchanged on 4.57 (b),
    and its forward raises on transformers 5: (c) fails with the model's line, nothing is written."""
    folder = tmp_path / "speaks_v4_only"  # a name of its own: transformers keeps a folder's modules by its name
    source = zoo_folder("np_buffer")
    folder.mkdir()
    for path in source.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    modeling = folder / "modeling_lgtoy.py"
    text = modeling.read_text()
    marker = "        hidden = self.embed_tokens(input_ids) + self.positions"
    assert marker in text
    modeling.write_text(
        text.replace(
            marker,
            "        import transformers\n\n"
            "        if transformers.__version__.startswith('5'):\n"
            "            raise RuntimeError('written for transformers 4 only')\n" + marker,
        )
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.out) == ("not_fixed", None) and not (tmp_path / "fixed").exists()
    assert [(p.name, p.ok) for p in result.proofs if p.transformers] == [
        ("loads_right", True),
        ("saves_and_reloads", True),
        ("unchanged_before_v5", True),
        ("same_outputs", False),
    ]
    detail = result.proof("same_outputs").detail
    assert detail.startswith(f"on transformers {TRANSFORMERS_VERSION} the patched copy's forward raised RuntimeError")
    assert "modeling_lgtoy.py:" in detail and "written for transformers 4 only" in detail


@v5_only
def test_without_weights_the_change_for_code_past_the_load_is_written_too(zoo_folder, compat, tmp_path):
    """No weights: the files call DynamicCache.from_legacy_cache, which this transformers lacks, so the workaround's
    source fix is part of the change; (c) runs both built from the config with the same synthetic weights."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in zoo_folder("v4_legacy_cache").iterdir():
        if path.suffix != ".safetensors":
            (bare / path.name).write_bytes(path.read_bytes())
    result = loadguard.fix(bare, tmp_path / "fixed", trust_remote_code=True)
    assert result.status == "fixed" and result.weightless and "v4-legacy-cache" in result.workarounds
    assert any(c.workaround == "v4-legacy-cache" for c in result.changes)
    code = (tmp_path / "fixed" / "modeling_lgv4cache.py").read_text()
    assert "past_key_values = _v4_from_legacy_cache(DynamicCache, past_key_values or ())" in code
    assert [(p.name, p.ok, p.weightless) for p in result.proofs][-1] == ("same_outputs", True, True)


def test_empty_outputs_are_never_a_pass():
    empty = torch.zeros(2, 0, 8)
    ok, detail, _ = compare_outputs(side(empty), side(empty), "4.57.6", "5.25.0")
    assert ok is None and detail == "not compared: its logits hold no values"


def test_a_model_that_runs_on_neither_release_is_not_compared_not_failed():
    crash = {
        "stage": "forward",
        "type": "RuntimeError",
        "message": "bad shape",
        "line": "m.py:3",
        "missing": "",
        "fixes": [],
    }
    ok, detail, _ = compare_outputs(side(error=crash), side(error=crash), "4.25.1", "5.25.0")
    assert ok is None and detail.startswith("not compared: it does not run on either release: on 4.25.1")


@pytest.fixture(scope="module")
def written_for_441(tmp_path_factory):
    """A cache holding transformers 4.41.2, the release v4_generate_hooks' config.json says it was saved with."""
    from ..conftest import environments_cache

    return environments_cache(tmp_path_factory, ("4.41.2",))


@v5_only
def test_v4_code_in_generate_is_fixed_and_proven_against_the_release_it_was_written_for(
    zoo_folder, written_for_441, monkeypatch, tmp_path
):
    """ChatGLM's way (issue 46, left before): its own generation hook calls _extract_past_from_model_output (gone since
    4.47) and its config has no num_hidden_layers (4.57 and 5.x build their default cache from it). fix writes both
    source fixes; proof (b) and (c) run the original on 4.41.2, where it was written, and the copy on plain
    transformers 5 answers with the same tokens. A helper answering as 4.42 did ((name, past)) would hand the model a
    past it refuses."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("LOADGUARD_CACHE", str(written_for_441))
    folder = zoo_folder("v4_generate_hooks")
    before = digest(folder)
    out = tmp_path / "hooks-fixed"
    result = loadguard.fix(folder, out, trust_remote_code=True)
    assert result.status == "fixed", result.to_json()
    assert {"v4-generate-hooks", "v4-cache-layer-count", "v4-generate-attention-mask"} <= set(result.workarounds)
    assert [(p.name, p.ok) for p in result.proofs if p.transformers] == [
        ("loads_right", True),
        ("saves_and_reloads", True),
        ("unchanged_before_v5", True),
        ("same_outputs", True),
    ]
    assert (
        result.proof("unchanged_before_v5").transformers == "4.41.2"
        and "4.41.2" in result.proof("same_outputs").detail
    )
    measured = result.proof("same_outputs").measured
    assert measured["tokens_patched"] == measured["tokens_original"] and len(measured["tokens_patched"]) == 8
    assert independent_check(out, "v4_generate_hooks") == [] and digest(folder) == before
    code = (out / "modeling_lgv4hooks.py").read_text()
    assert "_v4_extract_past_from_model_output(self, outputs, standardize_cache_format=" in code
    assert "def _supports_default_dynamic_cache(self):" in code
    assert 'if model_kwargs.get("attention_mask", 0) is None:' in code
    fixed = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    ran = model_outputs(fixed, ids=tokenized(str(out)))  # plain transformers 5, no workaround, the same prompt
    assert ran["error"] is None and ran["tokens"] == measured["tokens_patched"]


@v5_only
def test_a_model_that_loads_right_and_breaks_in_generate_is_not_called_clean(
    zoo_folder, written_for_441, monkeypatch, tmp_path
):
    """ChatGLM2's case: nothing is wrong after the load, and generate still raises on transformers 5. Before, fix said
    `clean` and wrote nothing; now the source fixes for its generate are the change, proven by (c)."""
    import json
    import shutil

    monkeypatch.setenv("LOADGUARD_CACHE", str(written_for_441))
    folder = tmp_path / "loads_right_generate_breaks"  # a name of its own: its modules are kept by it
    shutil.copytree(zoo_folder("v4_generate_hooks"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rebuild_buffers_in_init": True}))
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert result.findings == () and result.status == "fixed", result.to_json()
    assert {"v4-generate-hooks", "v4-cache-layer-count"} <= set(result.workarounds)
    assert [p.ok for p in result.proofs] == [True] * 7  # three static checks, (a), the save, (b), (c)


@v5_only
def test_a_clean_model_whose_files_only_mention_what_5x_lacks_stays_clean(zoo_folder, compat, tmp_path):
    """Its config class drops use_cache on 5.x and a method reads config.use_cache, but nothing that runs reads it:
    the model does not break when run, so fix says clean and writes nothing (the files' word alone is no verdict)."""
    import json
    import shutil

    folder = tmp_path / "mentions_use_cache"  # a name of its own: its modules are kept by it
    shutil.copytree(zoo_folder("clean"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "use_cache": True}))
    with open(folder / "modeling_lgtoy.py", "a") as handle:
        handle.write("\n\ndef _never_called(model):\n    return model.config.use_cache\n")
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.out, result.workarounds) == ("clean", None, ()), result.to_json()
    assert not (tmp_path / "fixed").exists()
