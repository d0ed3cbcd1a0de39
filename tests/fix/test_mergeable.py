"""What ``fix`` hands a maintainer is checked, not only what it ran (issue 57): the diff applies as ``git apply`` and
``patch -p1`` read it, the patched files compile on every supported Python and have no pyflakes finding the original
lacks, the copy saves and reloads, and every name that comes from the model is data in the code it writes."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import loadguard
from loadguard._fix.checks import compiles, diff_applies, lint_parity

from ..conftest import IS_V5, TRANSFORMERS_VERSION

v5_only = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads the zoo right")


@pytest.fixture
def compat(compat_cache, monkeypatch):
    """Proof (b)'s transformers 4.57 environment: the session's, created once."""
    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))


def copied(zoo_folder, entry: str, into: Path) -> Path:
    """A zoo folder under a name of its own (transformers keeps a folder's modules by its name)."""
    folder = into / f"lg_{entry}_{into.name}"
    shutil.copytree(zoo_folder(entry), folder)
    return folder


def edit(folder: Path, file: str, old: str, new: str) -> None:
    path = folder / file
    text = path.read_text()
    assert old in text, (file, old)
    path.write_text(text.replace(old, new, 1))


def check(result, name: str):
    return next(p for p in result.proofs if p.name == name)


def applies(original: Path, diff: str) -> None:
    """The diff as the maintainer applies it, with both tools, on a scratch copy of the original's files."""
    for command in (["git", "apply", "--check", "-"], ["patch", "-p1", "--dry-run", "--batch"]):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(command, cwd=original, input=diff, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stdout, done.stderr)


# -- the checks themselves: a positive and a negative case each --------------------------------------------------------


def test_lint_parity_fails_a_name_the_patch_left_undefined_and_passes_what_the_original_had():
    original = {"m.py": "from x import *\n\ndef f():\n    return g\n"}  # the original's own findings are its own
    assert lint_parity(original, {"m.py": original["m.py"] + "\nA = 1\n"}).ok is True
    plain = {"m.py": "def f():\n    return 1\n"}
    broken = lint_parity(plain, {"m.py": plain["m.py"] + "\ndef h():\n    return _expand_mask_bloom(1)\n"})
    assert broken.ok is False and "undefined name '_expand_mask_bloom'" in broken.detail and "m.py:" in broken.detail
    twice = lint_parity({"m.py": "def f():\n    pass\n"}, {"m.py": "def f():\n    pass\n\ndef f():\n    pass\n"})
    assert twice.ok is False and "redefinition of unused 'f'" in twice.detail


def test_compiles_fails_an_f_string_that_reuses_its_quote_before_python_3_12():
    assert compiles({"m.py": "x = f'{len(\"a\")}'\n"}).ok is True
    nested = compiles({"m.py": "x = f'{getattr(config, 'max_length', 20)}'\n"})
    assert nested.ok is False and "m.py" in nested.detail
    assert compiles({"m.py": "def f(:\n"}).ok is False


def test_diff_applies_fails_a_diff_whose_context_is_not_the_original():
    original = {"m.py": "a = 1\nb = 2\n"}
    good = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    assert diff_applies(original, good).ok is True
    assert diff_applies(original, good.replace(" a = 1", " a = 9")).ok is False


# -- what fix wrote on today's main that no maintainer merges ----------------------------------------------------------

MPT_IMPORTS = (
    "from transformers.models.bloom.modeling_bloom import _expand_mask as _expand_mask_bloom\n"
    "from transformers.models.opt.modeling_opt import _expand_mask as _expand_mask_opt, "
    "_make_causal_mask as _make_causal_mask_opt\n"
)
PREFIX_LM = '''
    def prefix_lm_masks(self, mask, shape):
        """MPT's prefix-LM conversion: a path no proof runs."""
        return _expand_mask_bloom(mask, 4), _expand_mask_opt(mask, mask.dtype), _make_causal_mask_opt(shape, mask.dtype, "cpu")
'''


@v5_only
def test_aliased_v4_helpers_keep_the_names_their_call_sites_use(zoo_folder, compat, tmp_path):
    folder = copied(zoo_folder, "v4_module_names", tmp_path)
    edit(folder, "modeling_lgv4names.py", "from .configuration", MPT_IMPORTS + "\nfrom .configuration")
    edit(
        folder,
        "modeling_lgv4names.py",
        "    def prune_head_rows",
        PREFIX_LM.lstrip("\n") + "\n    def prune_head_rows",
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, prove_outputs=False)
    assert result.status == "fixed", result.to_json()
    assert check(result, "lint_parity").ok is True, check(result, "lint_parity").detail
    patched = (tmp_path / "fixed" / "modeling_lgv4names.py").read_text()
    # the stand-ins' bodies run only on the prefix-LM path no proof takes: said, in the result and the PR text
    assert any(place.startswith("modeling_lgv4names.py:") for place in result.unrun), result.unrun
    notes = (tmp_path / "fixed" / "LOADGUARD_FIX.md").read_text()
    said = next(line for line in notes.splitlines() if line.startswith("- lines of this change no check ran: "))
    assert "`modeling_lgv4names.py:" in said
    defined = {n.name for n in ast.walk(ast.parse(patched)) if isinstance(n, ast.FunctionDef)}
    assert {"_expand_mask_bloom", "_expand_mask_opt", "_make_causal_mask_opt"} <= defined
    assert "import _expand_mask as _expand_mask_bloom" in patched  # 4.x still takes transformers' own


@v5_only
def test_a_file_without_a_trailing_newline_gets_a_diff_both_tools_apply(zoo_folder, tmp_path):
    """The source fix edits the last line of a file that has no newline after it: the diff marks it as diff does."""
    folder = copied(zoo_folder, "v4_max_length", tmp_path)
    modeling = folder / "modeling_lgv4gen.py"
    modeling.write_text(modeling.read_text().rstrip("\n"))
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert check(result, "diff_applies").ok is True, check(result, "diff_applies").detail
    assert "\\ No newline at end of file" in result.diff
    scratch = tmp_path / "scratch"
    shutil.copytree(folder, scratch)
    applies(scratch, result.diff)
    assert not (tmp_path / "fixed" / "modeling_lgv4gen.py").read_text().endswith("\n")  # as the original ended


@v5_only
def test_a_config_read_inside_a_single_quoted_f_string_compiles_before_python_3_12(zoo_folder, tmp_path):
    folder = copied(zoo_folder, "v4_max_length", tmp_path)
    edit(
        folder,
        "modeling_lgv4gen.py",
        "        self.cache_length = ",
        "        self.cache_name = f'cache-{config.max_length}'\n        self.cache_length = ",
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert check(result, "compiles").ok is True, check(result, "compiles").detail
    patched = (tmp_path / "fixed" / "modeling_lgv4gen.py").read_text()
    ast.parse(patched, feature_version=(3, 10))
    assert compiles({"modeling_lgv4gen.py": patched}).ok


@v5_only
def test_an_annotated_assignment_of_rope_scaling_is_not_wrapped(zoo_folder, tmp_path):
    folder = copied(zoo_folder, "v4_rope_scaling", tmp_path)
    edit(
        folder,
        "modeling_lgv4rope.py",
        "        if config.rope_scaling is None:",
        "        self.rope_scaling: dict | None = config.rope_scaling\n        if config.rope_scaling is None:",
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert result.status == "unverified", result.to_json()
    patched = (tmp_path / "fixed" / "modeling_lgv4rope.py").read_text()
    assert "self.rope_scaling: dict | None = _v4_rope_scaling(config.rope_scaling)" in patched


HOSTILE = "training;getattr(__import__('os'),'system')('touch PWNED');_=module"


@v5_only
@pytest.mark.parametrize("name", ["scale table", HOSTILE, "class"])
def test_a_buffer_name_that_is_not_an_identifier_is_data_never_code(zoo_folder, compat, tmp_path, monkeypatch, name):
    """torch accepts any string as a buffer name: the patch reads and writes it through a string literal (or refuses
    that one tensor), the rest is fixed, and nothing of the name runs when the copy loads."""
    folder = copied(zoo_folder, "np_buffer", tmp_path)
    edit(
        folder,
        "modeling_lgtoy.py",
        '        self.register_buffer("index"',
        f"        self.register_buffer({name!r}, torch.arange(4) * 2, persistent=False)\n"
        '        self.register_buffer("index"',
    )
    monkeypatch.chdir(tmp_path)
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert not (tmp_path / "PWNED").exists()
    assert result.status in ("fixed", "partly"), result.to_json()
    patched = (tmp_path / "fixed" / "modeling_lgtoy.py").read_text()
    for node in ast.walk(ast.parse(patched)):  # the name appears only as a string, never as code
        if isinstance(node, ast.Attribute):
            assert node.attr != name
        if isinstance(node, ast.Name):
            assert node.id != name
    if result.status == "fixed":
        from loadguard._codemod import string_literal

        assert any(f"getattr(module, {string_literal(name, q)})" in patched for q in "'\"")
    else:
        assert [r.tensor for r in result.refused] == [f"positions.{name}"]


@v5_only
def test_every_model_class_of_the_folder_saves_after_the_fix(zoo_folder, compat, tmp_path):
    """A class the load never built (the folder's AutoModel), whose __init__ never calls post_init either: after the fix
    it builds from its config and saves on transformers 5, as users fine-tune and save."""
    folder = copied(zoo_folder, "v4_tied_weights", tmp_path)
    edit(
        folder,
        "modeling_lgv4.py",
        "    def get_output_embeddings(self):\n        return self.lm_head\n",
        "    def get_output_embeddings(self):\n        return self.lm_head\n\n\n"
        "class LgV4Model(LgToyPreTrainedModel):\n    config_class = LgV4Config\n\n"
        "    def __init__(self, config):\n        LgToyPreTrainedModel.__init__(self, config)\n"
        "        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)\n"
        "        # no self.post_init(): written for transformers 4.x\n",
    )
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "modeling_lgv4.LgV4Model"
    (folder / "config.json").write_text(json.dumps(config))
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, prove_outputs=False)
    assert result.status == "fixed", result.to_json()
    assert check(result, "saves_and_reloads").ok is True
    patched = (tmp_path / "fixed" / "modeling_lgv4.py").read_text()
    assert patched.count("self.post_init()\n") == 2  # LgV4ForCausalLM's and LgV4Model's, where transformers 5 runs
    from transformers import AutoConfig, AutoModel

    fixed = tmp_path / "fixed"
    model = AutoModel.from_config(AutoConfig.from_pretrained(fixed, trust_remote_code=True), trust_remote_code=True)
    model.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "model.safetensors").is_file()


@v5_only
def test_an_unused_class_with_a_v4_tie_list_is_refused_alone_and_the_rest_fixed(zoo_folder, compat, tmp_path):
    folder = copied(zoo_folder, "v4_tied_weights", tmp_path)
    edit(
        folder,
        "modeling_lgv4.py",
        "    def get_output_embeddings(self):\n        return self.lm_head\n",
        "    def get_output_embeddings(self):\n        return self.lm_head\n\n\n"
        "class LgV4ForRanking(LgToyPreTrainedModel):\n    config_class = LgV4Config\n"
        '    _tied_weights_keys = ["score.weight"]\n\n'
        "    def __init__(self, config):\n        LgToyPreTrainedModel.__init__(self, config)\n"
        "        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)\n",
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, prove_outputs=False)
    assert result.status == "partly", result.to_json()
    assert all(p.ok for p in result.proofs), result.to_json()
    (left,) = [r.reason for r in result.refused]
    assert "LgV4ForRanking._tied_weights_keys in modeling_lgv4.py is a transformers 4 list" in left
    patched = (tmp_path / "fixed" / "modeling_lgv4.py").read_text()
    assert "_tied_weights_keys = {" in patched and '_tied_weights_keys = ["score.weight"]' in patched


# -- names as data, fuzzed ------------------------------------------------------------------------------------------

NAMES = st.one_of(
    st.text(min_size=1, max_size=24),
    st.sampled_from(["class", "def", "None", "x y", "a'b", 'a"b', "a\nb", "ключ", "x;import os", "__import__('os')"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NAMES)
def test_any_buffer_name_is_a_string_in_the_branch_that_recomputes_it(name):
    """Whatever string names the buffer, the recompute the codemod writes reads and writes it through a string literal:
    it parses, recomputes the value, and the name never becomes a name, an attribute or a statement of the code."""
    import torch

    from loadguard._codemod import Refused, add_branches, recompute

    probe = torch.nn.Module()
    try:
        probe.register_buffer(name, torch.zeros(1))
    except (KeyError, TypeError):
        assume(False)  # torch refuses it ('.', '', an existing attribute): no model can hold it
    source = (
        "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n    def __init__(self):\n"
        f"        super().__init__()\n        self.register_buffer({name!r}, torch.arange(4) * 2, persistent=False)\n\n\n"
        "class Base(nn.Module):\n    def _init_weights(self, module):\n        pass\n"
    )
    try:
        branch = recompute(source, 8, name, "buffer", on_meta=False)
        patched = add_branches(source, "Base", [branch])
    except Refused:
        return
    tree = ast.parse(patched)
    for node in ast.walk(tree):
        assert not (isinstance(node, ast.Attribute) and node.attr == name and not name.isidentifier())
        assert not (isinstance(node, ast.Name) and node.id == name)
    namespace: dict = {}
    exec(compile(patched, "patched.py", "exec"), namespace)
    module = namespace["M"]()
    getattr(module, name).zero_()
    namespace["Base"]()._init_weights(module)
    assert getattr(module, name).tolist() == [0, 2, 4, 6]


# -- outputs that cannot be compared are "not compared", and (a) and (b) decide -------------------------------------


def _seen(values, **extra):
    return {"inputs": ["input_ids"], "dtype": "float32", "kind": "logits", "values": values, "tokens": None, **extra}


def test_an_original_that_answers_nan_where_it_was_written_is_not_compared():
    import torch

    from loadguard._fix.across import compare_outputs

    finite = torch.zeros(1, 2, 4)
    ok, detail, _ = compare_outputs(_seen(torch.full((1, 2, 4), float("nan"))), _seen(finite), "4.57.6", "5.25.0")
    assert ok is None and detail.startswith("not compared: the original's logits on transformers 4.57.6 hold NaN")
    ok, detail, _ = compare_outputs(_seen(finite), _seen(torch.full((1, 2, 4), float("nan"))), "4.57.6", "5.25.0")
    assert ok is False and "the patched copy's logits on 5.25.0 hold NaN or Inf" in detail  # the copy's own NaN fails


def test_an_original_that_differs_from_itself_is_not_compared_and_does_not_block_the_fix():
    import torch

    from loadguard._fix.across import compare_outputs
    from loadguard._fix.fixing import _status
    from loadguard._fix.proofs import Proof

    noisy = _seen(torch.zeros(1, 2, 4), unsteady=0.25)
    ok, detail, _ = compare_outputs(noisy, _seen(torch.ones(1, 2, 4)), "4.57.6", "5.25.0")
    assert ok is None and "the original's outputs on transformers 4.57.6 differ between two runs" in detail
    decided = (Proof("loads_right", "5.25.0", True, "clean"), Proof("same_outputs", "5.25.0 vs 4.57.6", ok, detail))
    assert _status(True, decided, []) == "fixed"  # (a) and (b) decide
    unrun = (Proof("loads_right", "5.25.0", True, "clean"), Proof("unchanged_before_v5", "4.57.6", None, "not run: x"))
    assert _status(True, unrun, []) == "unverified"  # a proof that could not run still leaves it unproven


def test_a_forward_that_adds_noise_is_seen_as_unsteady():
    import torch

    from loadguard._hf import model_outputs

    class Noisy(torch.nn.Module):
        config = type("C", (), {"vocab_size": 16})()

        def forward(self, input_ids):
            return (torch.randn(input_ids.shape[0], input_ids.shape[1], 16),)

    class Steady(Noisy):
        def forward(self, input_ids):
            return (torch.nn.functional.one_hot(input_ids, 16).float(),)

    assert model_outputs(Noisy(), generate=False)["unsteady"] > 0
    assert model_outputs(Steady(), generate=False)["unsteady"] is None


@v5_only
@pytest.mark.parametrize("entry", ["np_buffer", "v4_tied_weights"])
def test_the_edit_looks_like_the_file(zoo_folder, tmp_path, entry):
    """Added lines within the file's own width, in its quotes, new absolute imports with its absolute imports, and no
    comment that names the tool."""
    from loadguard._codemod import preferred_quote, width_of
    from loadguard._fix.coverage import added_lines

    folder = copied(zoo_folder, entry, tmp_path)
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    for name, lines in added_lines(result.diff).items():
        original = (folder / name).read_text()
        patched = (tmp_path / "fixed" / name).read_text().split("\n")
        for number in lines:
            text = patched[number - 1]
            assert len(text) <= width_of(original), (name, text)
            assert "loadguard" not in text, (name, text)
            other = "'" if preferred_quote(original) == '"' else '"'
            assert f"{other}lm_head.weight{other}" not in text and f"{other}_is_hf_initialized{other}" not in text
        tree = ast.parse("\n".join(patched))
        kinds = [
            "relative" if isinstance(node, ast.ImportFrom) and node.level else "absolute"
            for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
        ]
        assert kinds == sorted(kinds), (name, kinds)  # absolute imports first, then relative ones
