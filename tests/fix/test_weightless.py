"""``loadguard fix`` without the weights: a folder of code and config (the state of a Hub repository one has not
downloaded) gets the same patch as with its checkpoint, proven without weights: (a) the scan of the patched copy is
clean, (b) on transformers 4 both codes build the same buffers and tensor attributes. Never "corrupt or truncated"."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import loadguard

from ..conftest import IS_V5, TRANSFORMERS_VERSION, run_cli
from .test_fix import digest, independent_check

v5_only = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads the zoo right")


@pytest.fixture
def compat(compat_cache, monkeypatch):
    monkeypatch.setenv("LOADGUARD_CACHE", str(compat_cache))


def without_weights(folder: Path, target: Path) -> Path:
    """A copy of ``folder`` with its code, config and tokenizer and no checkpoint."""
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.index.json"))
    return target


@v5_only
def test_a_folder_without_weights_gets_the_same_patch_proven_without_weights(zoo_folder, compat, tmp_path):
    folder = zoo_folder("np_buffer")
    bare = without_weights(folder, tmp_path / "np_bare")
    before = digest(bare)
    weighed = loadguard.fix(folder, tmp_path / "with-weights", trust_remote_code=True)
    result = loadguard.fix(bare, tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.weightless, weighed.weightless) == ("fixed", True, False)
    assert result.diff == weighed.diff and result.diff  # the same change, from a scan instead of a load
    assert {f.tensor for f in result.findings} == {f.tensor for f in weighed.findings}
    assert all(f.predicted for f in result.findings)
    assert [(p.name, p.ok, p.weightless) for p in result.proofs if p.transformers] == [
        ("loads_right", True, True),
        ("saves_and_reloads", True, True),  # built from the config with synthetic values, saved, loaded again
        ("unchanged_before_v5", True, True),
        ("same_outputs", True, True),  # both built from the config with the same synthetic weights
    ]
    assert "no checkpoint: both built from the config, every parameter given the same synthetic values" in (
        result.proof("same_outputs").detail
    )
    assert (
        result.proof("same_outputs").measured["tokens_patched"]
        == result.proof("same_outputs").measured["tokens_original"]
    )
    assert "without weights" in result.proof("loads_right").detail
    assert "4 buffers and tensor attributes bit-identical" in result.proof("unchanged_before_v5").detail
    assert "36 parameters of the same names, shapes and dtypes" in result.proof("unchanged_before_v5").detail
    assert digest(bare) == before
    written = sorted(p.name for p in (tmp_path / "fixed").iterdir())
    assert not [n for n in written if n.endswith(".safetensors")] and "LOADGUARD_FIX.md" in written
    notes = (tmp_path / "fixed" / "LOADGUARD_FIX.md").read_text()
    assert "- without the weights (only the code and the config were at hand)" in notes
    # the code written without weights is right once the weights are beside it: the independent check
    for weights in folder.glob("*.safetensors"):
        shutil.copy(weights, tmp_path / "fixed" / weights.name)
    assert independent_check(tmp_path / "fixed", "np_buffer") == []
    assert independent_check(folder, "np_buffer") != []


@v5_only
def test_a_weightless_patch_that_fails_its_proofs_is_not_written(zoo_folder, compat, tmp_path):
    """shared_buffer: the recompute reads a mask the parent passed in, left on meta: the scan of the patched copy says
    so as the load does."""
    bare = without_weights(zoo_folder("shared_buffer"), tmp_path / "shared_bare")
    result = loadguard.fix(bare, tmp_path / "fixed", trust_remote_code=True)
    assert (result.status, result.out, result.weightless) == ("not_fixed", None, True)
    assert result.proof("loads_right").ok is False and result.proof("loads_right").weightless
    assert not (tmp_path / "fixed").exists()


def test_audit_of_a_folder_without_weights_says_there_are_none(zoo_folder, tmp_path, capsys):
    bare = without_weights(zoo_folder("np_buffer"), tmp_path / "audit_bare")
    code, out, err = run_cli(capsys, "audit", str(bare), "--trust-remote-code")
    assert code == 2 and "holds no weights, only code and config" in err
    assert "corrupt" not in err and "truncated" not in err
    assert "loadguard scan" in err and "loadguard fix" in err


def hub_cache(root: Path, repo_id: str, folder: Path) -> Path:
    """A Hugging Face cache holding one snapshot of ``repo_id`` as ``hf download`` leaves it: every file of the snapshot a
    symlink into ``blobs/``."""
    revision = "0" * 40
    base = root / f"models--{repo_id.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(revision)
    snapshot, blobs = base / "snapshots" / revision, base / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in folder.iterdir():
        blob = blobs / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snapshot


@v5_only
def test_a_hub_id_is_fixed_without_fetching_weights(zoo_folder, compat, tmp_path, capsys, monkeypatch):
    """--no-weights: weight files are left out of the fetch; the snapshot's code files are links into the cache's blobs
    and are patched all the same (the copy holds real files; the cache is never written)."""
    import huggingface_hub.constants

    from loadguard._fix import files

    snapshot = hub_cache(
        tmp_path / "hub", "lg-org/toy", without_weights(zoo_folder("np_buffer"), tmp_path / "hub_bare")
    )
    for name, value in (("HF_HUB_CACHE", str(tmp_path / "hub")), ("HF_HUB_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    real, asked_file = files.snapshot_download, tmp_path / "asked.json"

    def fetch(repo_id, **options):  # runs in the child the fix is made in: what it asked, kept in a file
        asked_file.write_text(json.dumps(options))
        return real(repo_id, **options)

    monkeypatch.setattr(files, "snapshot_download", fetch)
    before = digest(tmp_path / "hub")
    code, out, err = run_cli(
        capsys,
        "fix",
        "lg-org/toy",
        "--out",
        str(tmp_path / "o"),
        "--trust-remote-code",
        "--no-weights",
        "--format",
        "json",
    )
    assert code == 0, err
    document, asked = json.loads(out), json.loads(asked_file.read_text())
    assert "*.safetensors" in asked["ignore_patterns"] and "*.model" not in asked["ignore_patterns"]
    assert (
        document["weightless"] is True
        and [p["weightless"] for p in document["proofs"] if p["transformers"]] == [True] * 4
    )
    assert {c["file"] for c in document["changes"]} == {"modeling_lgtoy.py"}  # not "transformers' own code"
    assert (snapshot / "modeling_lgtoy.py").is_symlink() and not (tmp_path / "o" / "modeling_lgtoy.py").is_symlink()
    assert digest(tmp_path / "hub") == before
    script = (tmp_path / "o" / "loadguard-propose.sh").read_text()
    assert "hf upload lg-org/toy . . --include modeling_lgtoy.py --create-pr" in script
    assert "lg-org/toy" in (tmp_path / "o" / "LOADGUARD_FIX.md").read_text()  # the model by its Hub id
