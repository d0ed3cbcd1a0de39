"""``loadguard fix``: the patched copy loads right on plain transformers 5 (judged by an independent check: a plain
``from_pretrained`` under deterministic poison against an eager construction, not loadguard's audit), loads to the
same tensors on 4.57, and a patch that fails a proof is never written. The original folder is never written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

import loadguard
from loadguard import zoo

from ..conftest import IS_V5, TRANSFORMERS_VERSION, all_tensors, run_cli, torch_fills_uninitialized

v5_only = pytest.mark.skipif(
    not IS_V5,
    reason=f"transformers {TRANSFORMERS_VERSION} loads the zoo right: nothing to fix (test_on_4_57_there_is_nothing_to_fix)",
)


def digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def independent_check(folder: Path, entry: str) -> list[str]:
    """The tensors a plain ``from_pretrained`` of ``folder`` (no workaround, leftover memory NaN / INT_MAX through torch's
    own switches) gets wrong against the zoo model built eagerly: the ground truth. Uses nothing of loadguard's audit."""
    import sys

    import torch
    from transformers import AutoModelForCausalLM

    # transformers keeps a folder's remote-code modules by the folder's name: a test's earlier load of another folder of
    # the same name must not answer for this one
    stem = Path(folder).name.replace(".", "_dot_").replace("-", "_hyphen_")
    for name in [n for n in sys.modules if n.split(".")[:2] == ["transformers_modules", stem]]:
        del sys.modules[name]
    with torch_fills_uninitialized():
        loaded = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    truth, got = all_tensors(zoo.build_model(entry)), all_tensors(loaded)
    wrong = sorted(set(truth) ^ set(got))
    for name in sorted(set(truth) & set(got)):
        if got[name].is_meta or not torch.equal(got[name].detach().to(truth[name].dtype), truth[name].detach()):
            wrong.append(name)
    return wrong


@pytest.fixture
def compat(compat_cache, monkeypatch):
    """fix's 4.57 proof runs in the session's cached environment."""
    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))


@v5_only
def test_np_buffer_is_fixed_proven_and_written_beside_an_untouched_original(zoo_folder, compat, tmp_path):
    folder = zoo_folder("np_buffer")
    before = digest(folder)
    out = tmp_path / "np_buffer-fixed"
    result = loadguard.fix(folder, out, trust_remote_code=True)
    assert (result.status, result.ok, result.out) == ("fixed", True, str(out))
    assert {f.tensor for f in result.findings} == {
        "positions.table",
        "positions.index",
        "layers.0.attn.causal_mask",
        "layers.1.attn.causal_mask",
    }
    assert [(p.name, p.transformers, p.ok) for p in result.proofs] == [
        ("diff_applies", "", True),  # the checks that need no model run, first
        ("compiles", "", True),
        ("lint_parity", "", True),
        ("loads_right", TRANSFORMERS_VERSION, True),
        ("saves_and_reloads", TRANSFORMERS_VERSION, True),
        ("unchanged_before_v5", "4.57.6", True),
        ("same_outputs", f"{TRANSFORMERS_VERSION} vs 4.57.6", True),
    ]
    assert "first forward: equal" in result.proof("unchanged_before_v5").detail
    # (c): the patched copy on 5.x answers as the original did on 4.57: logits and 8 greedy tokens
    measured = result.proof("same_outputs").measured
    assert measured["max_abs_diff"] <= measured["tolerance"] == 1e-4 and measured["dtype"] == "float32"
    assert measured["tokens_patched"] == measured["tokens_original"] and len(measured["tokens_original"]) == 8
    from loadguard._hf import tokenized

    prompt = tokenized(str(folder))  # the model's own tokenizer encodes the prompt both sides run on
    assert measured["inputs"] == ["attention_mask", "input_ids"] and measured["positions"] == 2 * len(prompt[0])
    assert digest(folder) == before  # the original folder: not a byte written
    assert (
        os.stat(out / "model.safetensors").st_ino == os.stat(folder / "model.safetensors").st_ino
    )  # linked, not copied
    assert (out / "loadguard-fix.diff").read_text() == result.diff
    assert (
        "module.table.copy_(sincos_table(module.num_positions, module.dim))" in (out / "modeling_lgtoy.py").read_text()
    )
    notes = (out / "LOADGUARD_FIX.md").read_text()
    assert (
        "- `positions.index`: uninitialized, made at `modeling_lgtoy.py:36`" in notes
        and "transformers 4.57.6, unchanged before v5: passed" in notes
    )
    assert independent_check(folder, "np_buffer") != [] and independent_check(out, "np_buffer") == []
    # the diff is a patch: applied to a copy of the original it gives the fixed code
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "modeling_lgtoy.py").write_text((folder / "modeling_lgtoy.py").read_text())
    subprocess.run(["git", "apply", str(out / "loadguard-fix.diff")], cwd=copy, check=True, capture_output=True)
    assert (copy / "modeling_lgtoy.py").read_text() == (out / "modeling_lgtoy.py").read_text()


@v5_only
@pytest.mark.parametrize(
    ("entry", "kinds"),
    [
        (
            "minicpmv_like",
            ["workaround", "workaround", "recompute"],
        ),  # the bundled MiniCPM-V-shaped model: typing, post_init, pos_embed
        ("overwritten", ["guard_overwrites"]),
        ("v4_llama_flash", ["workaround", "keep_arguments", "recompute", "recompute"]),
    ],
)
def test_the_fixed_copy_loads_right_on_plain_transformers_with_no_workaround(
    entry, kinds, zoo_folder, compat, tmp_path
):
    folder = zoo_folder(entry)
    result = loadguard.fix(folder, tmp_path / f"{entry}-fixed", trust_remote_code=True)
    assert result.status == "fixed", result.to_json()
    assert sorted(c.kind for c in result.changes) == sorted(kinds)
    outputs = result.proof("same_outputs")
    if entry == "minicpmv_like":  # (c) runs its language model alone, which holds no changed tensor: not a proof of it
        assert outputs.ok is None and outputs.detail.startswith("not compared for the change: what ran holds no")
        assert "the changed resampler.pos_embed lie outside it" in outputs.detail
    assert all(p.ok for p in result.proofs if p is not outputs) and (outputs.ok or entry == "minicpmv_like")
    assert independent_check(tmp_path / f"{entry}-fixed", entry) == []


@v5_only
def test_a_patch_that_fails_a_proof_is_not_written_and_says_which(zoo_folder, compat, tmp_path):
    """shared_buffer: one mask tensor made in the parent and passed to every layer; recomputing it from the kept
    argument reads a tensor left on meta: proof (a) fails, and the 4.57 side gains an attribute."""
    result = loadguard.fix(zoo_folder("shared_buffer"), tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.out) == ("not_fixed", None)
    assert [p.ok for p in result.proofs if p.transformers] == [False, None, False, None]  # (a), saves, (b), (c)
    assert result.proof("same_outputs").detail == f"not run: the patched copy did not load on {TRANSFORMERS_VERSION}"
    assert "Cannot copy out of meta tensor" in result.proof("loads_right").detail
    assert not (tmp_path / "fixed").exists() and list(tmp_path.iterdir()) == []  # not even the staging folder


@v5_only
def test_no_verify_writes_an_unproven_fix_and_says_so(zoo_folder, tmp_path):
    result = loadguard.fix(zoo_folder("tensor_attribute"), tmp_path / "fixed", trust_remote_code=True, verify=False)
    # only the checks that need no model run: the diff applies, compiles and lints as the original did
    assert (result.status, [p.name for p in result.proofs], result.ok) == (
        "unverified",
        ["diff_applies", "compiles", "lint_parity"],
        False,
    )
    assert all(p.ok for p in result.proofs)
    notes = (tmp_path / "fixed" / "LOADGUARD_FIX.md").read_text()
    assert "not proven on any transformers release: written with `--no-verify`" in notes


@v5_only
def test_cli_json_lists_each_change_with_its_findings(zoo_folder, compat, tmp_path, capsys):
    code, out, err = run_cli(
        capsys,
        "fix",
        str(zoo_folder("missing_key")),
        "--out",
        str(tmp_path / "fixed"),
        "--trust-remote-code",
        "--format",
        "json",
    )
    document = json.loads(out)
    assert code == 0, err
    assert document["status"] == "fixed" and document["changes"][0]["tensors"] == ["logit_scale"]
    (compat,) = [p for p in document["proofs"] if p["name"] == "unchanged_before_v5"]
    assert compat["ok"] is True and "logit_scale" in compat["detail"]  # wrong on 4.57 too, now right there


@pytest.mark.parametrize("case", ["missing", "inside", "not_empty", "untrusted", "hub_offline"])
def test_bad_input_is_one_line_exit_2_and_no_file_written(case, zoo_folder, tmp_path, capsys):
    folder = zoo_folder("np_buffer")
    before = digest(folder)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    arguments = {
        "missing": [str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--trust-remote-code"],
        "inside": [str(folder), "--out", str(folder / "fixed"), "--trust-remote-code"],
        "not_empty": [str(folder), "--out", str(tmp_path / "full"), "--trust-remote-code"],
        "untrusted": [str(folder), "--out", str(tmp_path / "o")],
        "hub_offline": [
            "someorg/some-model",
            "--out",
            str(tmp_path / "o"),
            "--trust-remote-code",
        ],  # HF_HUB_OFFLINE=1 (conftest)
    }[case]
    code, out, err = run_cli(capsys, "fix", *arguments)
    assert code == 2 and err.startswith("Error: ") and "Traceback" not in err
    assert case != "hub_offline" or "offline" in err
    assert digest(folder) == before and not (tmp_path / "o").exists() and not (folder / "fixed").exists()


@pytest.mark.skipif(IS_V5, reason="on transformers 5 these models load broken: the tests above fix them")
def test_on_4_57_there_is_nothing_to_fix(zoo_folder, tmp_path):
    result = loadguard.fix(zoo_folder("np_buffer"), tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.out, result.changes) == ("clean", None, ())
    assert not (tmp_path / "fixed").exists()


@v5_only
def test_a_fleet_writes_one_subfolder_per_model_and_a_row_for_one_that_cannot_run(zoo_folder, tmp_path, capsys):
    listing = tmp_path / "models.txt"
    listing.write_text(
        f"{zoo_folder('tensor_attribute')}  # a rotary table kept as a plain attribute\n{tmp_path / 'gone'}\n"
    )
    code, out, err = run_cli(
        capsys,
        "fix",
        "--from",
        str(listing),
        "--out",
        str(tmp_path / "fixed"),
        "--trust-remote-code",
        "--no-verify",
        "--format",
        "json",
    )
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 3  # partial: one model could not run
    assert [(r["status"], r["ok"]) for r in rows] == [("unverified", False), ("could_not_run", False)]
    assert "is not a model folder" in rows[1]["error"]["message"]
    assert sorted(p.name for p in (tmp_path / "fixed").iterdir()) == [
        "model"
    ]  # the zoo folder's name; nothing for the missing one
    assert (tmp_path / "fixed" / "model" / "LOADGUARD_FIX.md").is_file()


@v5_only
@pytest.mark.slow
@pytest.mark.parametrize("entry", [e.name for e in zoo.entries()])
def test_every_zoo_entry_gets_the_fix_it_expects(entry, zoo_folder, compat, tmp_path):
    """Each entry's expected outcome (ZooEntry.fix): a proven patch that an independent check finds right, nothing to
    change, or no patch and the reason (make test-slow: about 15 s an entry)."""
    expected = zoo.get(entry).fix
    out = tmp_path / f"{entry}-fixed"
    result = loadguard.fix(zoo_folder(entry), out, trust_remote_code=True)
    if expected == "fixed":
        assert result.status == "fixed" and all(p.ok for p in result.proofs), result.to_json()
        assert independent_check(out, entry) == []
    elif expected == "clean":
        assert (result.status, result.out) == ("clean", None)
    elif expected.startswith("partly: "):
        assert result.status == "partly" and result.refused and all(p.ok for p in result.proofs), result.to_json()
    else:
        assert expected.startswith("not fixable: ")
        assert (result.status, result.out) == ("not_fixed", None) and not out.exists()
        assert result.refused or any(p.ok is False for p in result.proofs)


@v5_only
def test_a_link_leaving_the_model_folder_is_never_followed_into_the_fixed_copy(zoo_folder, tmp_path, capsys):
    """Its content would land in the fixed copy, and in a pull request: refused, exit 2, nothing written."""
    import shutil

    folder = tmp_path / "linked"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    secret = tmp_path / "secret.txt"
    secret.write_text("not the model's")
    (folder / "notes.txt").symlink_to(secret)
    code, out, err = run_cli(
        capsys, "fix", str(folder), "--out", str(tmp_path / "fixed"), "--trust-remote-code", "--no-verify"
    )
    assert code == 2 and "notes.txt" in err and "link leaving the model's folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked", "secret.txt"]  # no output, no staging folder left


TAMPER = """

_plain_init = LgToyForCausalLM.__init__


def _tampering_init(self, config, *args, **kwargs):
    _plain_init(self, config, *args, **kwargs)
    import os

    where = os.path.realpath(getattr(config, "_name_or_path", "") or ".")
    if ".loadguard-fix-" in where:  # only the copy being proven
        with open(os.path.join(where, "planted.txt"), "w") as handle:
            handle.write("published with the fix, were it not checked")


LgToyForCausalLM.__init__ = _tampering_init
"""


@v5_only
def test_a_copy_the_model_code_wrote_into_while_proven_is_not_published(zoo_folder, compat, tmp_path):
    """Issue 45, class 1: the staged copy is hashed before the proofs run the model's code, and compared before it is
    renamed into place: a file planted there is a failed row naming it, and nothing is written."""
    import shutil

    folder = tmp_path / "tampering"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    with open(folder / "modeling_lgtoy.py", "a") as handle:
        handle.write(TAMPER)
    before = digest(folder)
    out = tmp_path / "fixed"
    result = loadguard.fix(folder, out, trust_remote_code=True, compat_version="4.57.6")
    assert result.status == "not_fixed" and result.out is None and not out.exists()
    assert result.proof("loads_right").ok is True  # the patch itself is right: only the tampering stops it
    untouched = result.proofs[-1]
    assert untouched.name == "copy_untouched" and untouched.ok is False
    assert "planted.txt added" in untouched.detail and "not published" in untouched.detail
    assert digest(folder) == before and not [p for p in tmp_path.iterdir() if ".loadguard-fix-" in p.name]


FORGE = """

import transformers as _transformers

if _transformers.__version__.startswith("4."):

    def _forging_init(self, config, *args, **kwargs):
        import json
        import os

        forged = {"transformers": "4.57.6", "tensors": 40, "differ": [], "differ_count": 0, "forward": "equal"}
        print(json.dumps(forged), flush=True)
        os._exit(0)

    LgToyForCausalLM.__init__ = _forging_init
"""


@v5_only
def test_a_result_the_model_code_prints_is_not_a_proof(zoo_folder, compat, tmp_path):
    """Issue 45, class 1: under 4.x the model's code prints a result-shaped line and exits 0 before proof (b) compared
    anything: the result channel is not stdout and must carry the run's nonce, so nothing is written."""
    import shutil

    folder = tmp_path / "forging"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    with open(folder / "modeling_lgtoy.py", "a") as handle:
        handle.write(FORGE)
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, compat_version="4.57.6")
    assert result.status == "not_fixed" and not (tmp_path / "fixed").exists()
    (compat_proof,) = [p for p in result.proofs if p.name == "unchanged_before_v5"]
    assert compat_proof.ok is False and "ended without writing loadguard's result" in compat_proof.detail
