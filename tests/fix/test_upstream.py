"""The upstream patch beside the reproducer: CLIPModel's ``logit_scale``, which transformers' own ``_init_weights`` never
sets, recomputed where transformers would; the patch, applied to a copy of the installed transformers module, makes a
checkpoint without ``logit_scale`` load to the constructor's value (judged without loadguard's audit)."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys

import pytest

from ..conftest import IS_V5, TRANSFORMERS_VERSION, run_cli, torch_fills_uninitialized


@pytest.fixture
def clip_without_logit_scale(tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import CLIPConfig, CLIPModel

    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=32, patch_size=8
    )
    text = dict(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        bos_token_id=0,
        eos_token_id=1,
    )
    folder = tmp_path / "clip"
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    tensors.pop("logit_scale")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} keeps CLIP's constructed logit_scale")
def test_the_reproducer_folder_gets_the_patch_transformers_needs_and_it_works(
    clip_without_logit_scale, tmp_path, capsys
):
    import transformers

    code, out, err = run_cli(capsys, "audit", str(clip_without_logit_scale), "--reproducer", str(tmp_path / "repro"))
    assert code == 1 and "transformers-upstream.diff" in err
    diff = (tmp_path / "repro" / "transformers-upstream.diff").read_text()
    assert diff.startswith(
        "--- a/src/transformers/models/clip/modeling_clip.py\n+++ b/src/transformers/models/clip/modeling_clip.py\n"
    )
    assert "+        if isinstance(module, CLIPModel):" in diff
    assert re.search(
        r"^\+ +module.logit_scale.copy_\(torch.tensor\(module.config.logit_scale_init_value\)\)$", diff, re.M
    )

    # apply it to a copy of the installed module and load through the patched class, leftover memory poisoned
    installed = transformers.models.clip.modeling_clip.__file__
    work = tmp_path / "src" / "transformers" / "models" / "clip"
    work.mkdir(parents=True)
    (work / "modeling_clip.py").write_text(open(installed).read())
    subprocess.run(
        ["git", "apply", str(tmp_path / "repro" / "transformers-upstream.diff")],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    spec = importlib.util.spec_from_file_location(
        "transformers.models.clip.modeling_clip_patched", work / "modeling_clip.py"
    )
    patched = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = patched
    try:
        spec.loader.exec_module(patched)
        with torch_fills_uninitialized():
            model = patched.CLIPModel.from_pretrained(clip_without_logit_scale)
    finally:
        sys.modules.pop(spec.name, None)
    assert math.isclose(model.logit_scale.detach().item(), model.config.logit_scale_init_value, rel_tol=1e-6)


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} keeps CLIP's constructed logit_scale")
def test_fix_of_a_native_model_writes_nothing_and_hands_over_the_upstream_patch(clip_without_logit_scale, tmp_path):
    import loadguard

    result = loadguard.fix(clip_without_logit_scale, tmp_path / "fixed")
    assert (result.status, result.out, result.changes) == ("not_fixed", None, ())
    assert [r.tensor for r in result.refused] == ["logit_scale"] and "transformers-upstream.diff" in result.refused[
        0
    ].reason
    assert "module.logit_scale.copy_(torch.tensor(module.config.logit_scale_init_value))" in result.upstream
    assert not (tmp_path / "fixed").exists()
