"""``loadguard fix`` on code shaped like published remote code that stopped it before: v4-era imports and lookups whose
workaround now has a source edit, rotary tables made in the default dtype of a bfloat16 load, files of the folder that
are not Python it can parse, CRLF files, and the command that proposes the change on the Hub."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import loadguard
from loadguard import zoo

from ..conftest import IS_V5, TRANSFORMERS_VERSION
from .test_fix import independent_check

v5_only = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads the zoo right")


@pytest.fixture
def compat(compat_cache, monkeypatch):
    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))


@v5_only
@pytest.mark.parametrize(
    ("entry", "edit"),
    [
        # end to end in make test-slow (their source edits run as code in tests/codemod): bloom-era helpers and
        # pytorch_utils functions transformers 5 removed, ROPE_INIT_FUNCTIONS['default'] (4.4x Llama copies), an
        # attention-support property asking a submodule __init__ has not made yet
        pytest.param(
            "v4_module_names",
            "except ImportError:  # removed in transformers 5\n    def find_pruneable_heads_and_indices(",
            marks=pytest.mark.slow,
        ),
        pytest.param("v4_rope_default", 'if "default" not in ROPE_INIT_FUNCTIONS:', marks=pytest.mark.slow),
        pytest.param(
            "v4_attention_probe", "except AttributeError:  # asked before the submodule exists", marks=pytest.mark.slow
        ),
        # DeepSeek-style YaRN tables made in torch.get_default_dtype() by a helper, loaded in bfloat16
        ("yarn_rotary_bf16", "dtype=module.cos_cached.dtype,"),  # the loaded table's dtype, no global state
        # a quantized-cache bound from a local __init__ assigns under an if of the config: the if is replayed (its
        # branch runs as code for three configs in tests/codemod)
        pytest.param("conditional_state", "if module.config.quantize_kv_cache:", marks=pytest.mark.slow),
    ],
)
def test_published_shapes_get_a_proven_patch(entry, edit, zoo_folder, compat, tmp_path):
    assert zoo.get(entry).fix == "fixed"
    out = tmp_path / "fixed"
    result = loadguard.fix(zoo_folder(entry), out, trust_remote_code=True)
    assert result.status == "fixed" and all(p.ok for p in result.proofs), result.to_json()
    added = "\n".join(line[1:] for line in result.diff.splitlines() if line.startswith("+"))
    assert edit in added, result.diff
    assert independent_check(out, entry) == []


@v5_only
@pytest.mark.slow  # make test-slow; the fast check of the same behaviour is named in the docstring
def test_a_bfloat16_recompute_without_the_dtype_of_the_load_would_fail_proof_a(zoo_folder, compat, tmp_path):
    """The negative: the same branch run where the default dtype is float32 (as transformers 5 runs _init_weights)
    gives float32 tables; proof (a) refuses it. Fast: test_a_recompute_reading_the_default_dtype_runs_under_the_loaded_dtype."""
    from loadguard._codemod import write

    original = write._branch_text
    try:  # the recompute as __init__ wrote it, run where the default dtype is float32
        write._branch_text = lambda branch, parameter, owner="self": original(
            type(branch)(*[getattr(branch, f) for f in branch.__dataclass_fields__][:-1], False), parameter, owner
        ).replace("dtype=module.cos_cached.dtype", "dtype=torch.get_default_dtype()")
        result = loadguard.fix(zoo_folder("yarn_rotary_bf16"), tmp_path / "fixed", trust_remote_code=True)
    finally:
        write._branch_text = original
    assert result.status == "not_fixed" and result.proof("loads_right").ok is False
    # each tensor still wrong in the user's terms: dtype and device, and whether transformers ran the branch at all
    assert "rotary.cos_cached (float32 on cpu" in result.proof("loads_right").detail
    assert "_init_weights ran for rotary" in result.proof("loads_right").detail


def test_files_that_are_not_python_it_can_parse_are_left_out_until_needed(zoo_folder, tmp_path, monkeypatch):
    """A notebook cell saved as .py (`!pip install ...`) and a latin-1 file beside the model's code: not read, not
    an error; a tensor made in a file it cannot parse is a refusal naming the file."""
    folder = tmp_path / "lg_parse_model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    (folder / "notebook_cell.py").write_text("!pip install transformers==4.40\nimport torch\n")
    (folder / "legacy.py").write_bytes("# caf\xe9\nprint 'python 2'\n".encode("latin-1"))
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert result.status == ("unverified" if IS_V5 else "clean")  # 4.57 loads the zoo right: nothing to change
    assert not [r for r in result.refused if "notebook_cell" in r.reason or "legacy" in r.reason]
    if IS_V5:
        assert {c.file for c in result.changes} == {"modeling_lgtoy.py"}
        import loadguard._codemod as codemod

        real = codemod.parse_error
        monkeypatch.setattr(
            codemod, "parse_error", lambda text: "line 1: stand-in" if "class LgToyPositions" in text else real(text)
        )
        result = loadguard.fix(folder, tmp_path / "fixed-2", trust_remote_code=True, verify=False)
        refusal = next(r for r in result.refused if r.tensor == "positions.table")
        assert (
            "made in modeling_lgtoy.py, which is not Python loadguard can parse (line 1: stand-in)" in refusal.reason
        )


@v5_only
def test_a_crlf_file_keeps_its_line_endings_and_the_diff_applies(zoo_folder, tmp_path):
    folder = tmp_path / "lg_crlf_model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    modeling.write_bytes(modeling.read_bytes().replace(b"\n", b"\r\n"))
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    patched = (tmp_path / "fixed" / "modeling_lgtoy.py").read_bytes()
    assert patched.count(b"\n") == patched.count(b"\r\n") and b"module.table.copy_(" in patched
    changed = [line for line in result.diff.splitlines() if line.startswith(("+", "-"))]
    assert len(changed) < 30  # the edit, not every line of the file
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(modeling, copy / "modeling_lgtoy.py")
    subprocess.run(["patch", "-p1", "-i", str(tmp_path / "fixed" / "loadguard-fix.diff")], cwd=copy, check=True)
    assert (copy / "modeling_lgtoy.py").read_bytes() == patched


@v5_only
def test_the_hub_pr_command_is_one_the_hf_cli_accepts(zoo_folder, tmp_path):
    """loadguard-propose.sh beside LOADGUARD_FIX.md (never inside it): `hf upload ... --create-pr`, the changed code
    files only, every option one `hf upload` takes (checked against the installed CLI, not a copy of its documentation);
    a local folder's repository is asked for (REPO_ID), never a placeholder or a path of this machine."""
    result = loadguard.fix(zoo_folder("v4_module_names"), tmp_path / "fixed", trust_remote_code=True, verify=False)
    notes = (tmp_path / "fixed" / "LOADGUARD_FIX.md").read_text()
    assert "hf upload" not in notes and str(tmp_path) not in notes and "<original>" not in notes
    script = (tmp_path / "fixed" / "loadguard-propose.sh").read_text()
    command = next(line for line in script.splitlines() if line.startswith("hf upload "))
    assert command.startswith('hf upload "${REPO_ID:?set REPO_ID to the model\'s Hub id}" . . ')
    assert sorted(re.findall(r"--include (\S+)", command)) == sorted({c.file for c in result.changes})
    done = subprocess.run(["sh", str(tmp_path / "fixed" / "loadguard-propose.sh")], capture_output=True, text=True)
    assert done.returncode != 0 and "set REPO_ID to the model's Hub id" in done.stderr  # refuses until told
    hf = shutil.which("hf") or str(Path(sys.executable).with_name("hf"))  # the CLI huggingface_hub installs
    usage = subprocess.run([hf, "upload", "--help"], capture_output=True, text=True, check=True).stdout
    for option in set(re.findall(r"(--[a-z-]+)", command)):
        assert option in usage, option


def test_proof_b_runs_on_the_4x_the_model_was_written_for_then_on_4_57(tmp_path):
    from loadguard._fix.compat import written_for
    from loadguard._fix.proofs import COMPAT_VERSION

    def saved_with(version):
        (tmp_path / "config.json").write_text(json.dumps({"transformers_version": version} if version else {}))
        return written_for(tmp_path)

    assert saved_with("4.38.2") == ("4.38.2", COMPAT_VERSION)  # code written for 4.38 may not import on 4.57
    assert saved_with("4.57.1") == (COMPAT_VERSION,) and saved_with("5.25.0") == (COMPAT_VERSION,)
    assert saved_with(None) == (COMPAT_VERSION,) and saved_with("4.x-dev") == (COMPAT_VERSION,)
    assert saved_with("4.41.0.dev0") == ("4.41.0", COMPAT_VERSION)  # a development build: its release


def test_proof_b_loads_the_class_the_5x_side_loaded():
    """The auto class whose auto_map entry names the class the transformers 5 side built (not always the causal LM)."""
    import transformers

    from loadguard._hf import class_for

    config = type("C", (), {"auto_map": {"AutoModel": "m.Encoder", "AutoModelForCausalLM": "m.CausalLM"}})()
    assert class_for(config, "Encoder") is transformers.AutoModel
    assert class_for(config, "CausalLM") is transformers.AutoModelForCausalLM
    assert class_for(config, None) is transformers.AutoModelForCausalLM
    assert class_for(type("N", (), {})(), "BertModel") is transformers.BertModel  # transformers' own class


@v5_only
def test_a_tensor_attribute_of_a_module_transformers_never_initializes_is_refused_not_patched_dead(
    zoo_folder, compat, tmp_path, monkeypatch
):
    """CodeGen-style: ``scale_attn`` on a module whose parameters all load. transformers 5 never calls _init_weights
    for it (observed in the load, not assumed): refused with the reason and the line; the rest is fixed. The negative:
    with the observation switched off, the branch is written and proof (a) says it never ran."""
    result = loadguard.fix(zoo_folder("attribute_never_initialized"), tmp_path / "fixed", trust_remote_code=True)
    assert result.status == "partly" and all(p.ok for p in result.proofs), result.to_json()
    refusal = next(r for r in result.refused if r.tensor == "scaled.scale_attn")
    assert "transformers never calls _init_weights for scaled (LgScaledProjection)" in refusal.reason
    assert refusal.location == "modeling_lgcodegen.py:23"
    from loadguard._fix import fixing
    from loadguard._hf.patches import InitCalls

    monkeypatch.setattr(fixing, "init_weights_calls", lambda: contextlib.nullcontext(InitCalls()))
    blind = loadguard.fix(zoo_folder("attribute_never_initialized"), tmp_path / "blind", trust_remote_code=True)
    assert blind.status == "not_fixed" and blind.proof("loads_right").ok is False
    assert "scaled.scale_attn (float32 on meta" in blind.proof("loads_right").detail
    assert "_init_weights never ran for scaled" in blind.proof("loads_right").detail


def test_proof_b_loads_each_side_through_a_plain_module_name(tmp_path, monkeypatch, capsys):
    """transformers before 4.4x names a folder's remote-code module after the folder, unsanitized: the hidden staging
    folder (`.out.loadguard-fix-...`) is no module name there. Each side is loaded through a link named plainly."""
    from loadguard._fix import prove

    original, staging = tmp_path / "model", tmp_path / ".fixed.loadguard-fix-1-ab"
    original.mkdir()
    staging.mkdir()
    seen = {}

    def compare(first, second, *rest):
        seen.update(first=Path(first), second=Path(second))
        return {"ok": [Path(first).resolve() == original.resolve(), Path(second).resolve() == staging.resolve()]}

    monkeypatch.setattr(prove, "compare", compare)
    monkeypatch.setattr(sys, "argv", ["prove", str(original), str(staging), "", "", "loaded"])
    prove.main()
    assert json.loads(capsys.readouterr().out) == {"ok": [True, True]}
    assert re.fullmatch(r"lg_original_[0-9a-f]{8}", seen["first"].name)
    assert re.fullmatch(r"lg_patched_[0-9a-f]{8}", seen["second"].name)
    assert not seen["first"].exists()  # the links live only while the proof runs


@v5_only
def test_a_configuration_importing_transformers_onnx_is_fixed(zoo_folder, compat, tmp_path):
    """2022-23 configuration files import transformers.onnx (CodeGen2's `OnnxConfigWithPast, PatchingSpec`), which
    transformers 5 removed: `auto` gives the module back while loading; the fix imports it under try with a stand-in."""
    folder = tmp_path / "lg_onnx_model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    configuration = folder / "configuration_lgtoy.py"
    configuration.write_text(
        "from transformers.onnx import OnnxConfigWithPast, PatchingSpec\n"
        + configuration.read_text()
        + "\n\nclass LgToyOnnxConfig(OnnxConfigWithPast):\n    patching: PatchingSpec = None\n"
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert result.status == "fixed" and "v4-onnx-module" in result.workarounds, result.to_json()
    fixed = (tmp_path / "fixed" / "configuration_lgtoy.py").read_text()
    assert "try:\n    from transformers.onnx import OnnxConfigWithPast\nexcept ImportError:" in fixed
    assert independent_check(tmp_path / "fixed", "np_buffer") == []


@v5_only
def test_a_package_imported_only_inside_a_function_that_no_longer_imports_is_fixed(
    zoo_folder, compat, tmp_path, monkeypatch
):
    """Qwen-1: `from transformers_stream_generator.main import ...` inside chat_stream; the package is installed and
    wants a name transformers 5 removed. transformers' load-time import check stops the load; `auto` skips the check
    for it, and the fix imports it under try (which the check skips)."""
    packages = tmp_path / "site"
    (packages / "streamish").mkdir(parents=True)
    (packages / "streamish" / "__init__.py").write_text("from transformers import DisjunctiveConstraint\n")
    monkeypatch.syspath_prepend(str(packages))
    monkeypatch.setenv("PYTHONPATH", str(packages))  # the 4.57 side of the proof runs in another interpreter
    folder = tmp_path / "lg_lazy_model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    modeling.write_text(
        modeling.read_text()
        + "\n\ndef chat_stream(model):\n    from streamish import NewGenerationMixin\n\n    return NewGenerationMixin\n"
    )
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert result.status == "fixed" and "remote-code-lazy-imports" in result.workarounds, result.to_json()
    assert "    try:  # transformers checks the imports of remote code at load" in result.diff.replace("+", "")
    assert independent_check(tmp_path / "fixed", "np_buffer") == []


@v5_only
@pytest.mark.slow  # make test-slow; the fast check of the same behaviour is named in the docstring
def test_a_buffer_a_free_function_registers_is_fixed_by_calling_it_again(zoo_folder, compat, tmp_path):
    """A table made by a function of the file (not a method) that __init__ calls with self: the call is replayed.
    Fast: test_a_table_a_free_function_makes_on_the_module_is_recomputed_by_calling_it_again."""
    folder = tmp_path / "lg_free_fn_model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    text = modeling.read_text()
    made = (
        '        self.register_buffer("index", torch.arange(self.num_positions, dtype=torch.long), persistent=False)\n'
    )
    assert made in text
    text = text.replace(made, "        register_index(self, self.num_positions)\n").replace(
        "class LgToyPositions(nn.Module):",
        "def register_index(module, n, device=None):\n"
        '    module.register_buffer("index", torch.arange(n, dtype=torch.long, device=device), persistent=False)\n\n\n'
        "class LgToyPositions(nn.Module):",
    )
    modeling.write_text(text)
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert result.status == "fixed", result.to_json()
    assert "register_index(module, module.num_positions, device=module.index.device)" in result.diff
    assert independent_check(tmp_path / "fixed", "np_buffer") == []


@v5_only
@pytest.mark.slow  # make test-slow; the fast check of the same behaviour is named in the docstring
def test_a_checkpoint_holding_nan_is_bit_identical_to_itself_on_4x(zoo_folder, compat, tmp_path):
    """GLM-style code builds its layers with empty_init: a checkpoint saved from a fresh construction holds leftover
    memory, NaN included. Proof (b) compares bits, so the same NaN on both sides is equal (torch.equal never calls
    NaN equal: 1 to 9 'differing' weights that the patch never touched). Fast: test_proof_b_compares_bits."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "lg_nan_model"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    tensors = load_file(folder / "model.safetensors")
    name = next(k for k in sorted(tensors) if k.endswith("weight") and tensors[k].is_floating_point())
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[:3] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True)
    assert result.status == "fixed" and result.proof("unchanged_before_v5").ok is True, result.to_json()
    assert "bit-identical to the original's" in result.proof("unchanged_before_v5").detail


def test_proof_b_compares_bits():
    """The same NaN on both sides is equal (a checkpoint of empty_init code holds leftover memory), a different bit is
    not, and -0.0 is not 0.0: bit for bit, as proof (b) promises."""
    import torch

    from loadguard._fix.prove import same_bits

    nan = torch.tensor([1.0, float("nan"), 3.0])
    assert same_bits(nan, nan.clone()) and not torch.equal(nan, nan.clone())
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not same_bits(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0000002]))
    assert same_bits(torch.tensor([True, False]), torch.tensor([True, False]))
