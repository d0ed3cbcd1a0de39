"""Reproducers: standalone scripts (torch + transformers only) that exit 1 while the model loads wrong, 0 once fixed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loadguard.cli import main

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")
WITHOUT_LOADGUARD = "import runpy, sys; sys.modules['loadguard'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def _run(script, *args):
    """The script as a user runs it, with ``import loadguard`` made to fail."""
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_LOADGUARD, str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )


@needs_v5
@pytest.mark.parametrize(
    ("name", "scripts", "shown"),
    [
        (
            "np_buffer",
            ["reproduce_non_persistent_buffer.py"],
            "positions.index: from_pretrained leaves [9223372036854775807",
        ),
        ("overwritten", ["reproduce_checkpoint_fidelity.py"], "lm_head.weight: from_pretrained leaves"),
        ("tensor_attribute", ["reproduce_meta_leftover.py"], "positions.inv_freq: still on the meta device"),
        ("missing_key", ["reproduce_missing_key.py"], "logit_scale: not in the checkpoint and never initialized"),
    ],
)
def test_a_reproducer_fails_while_wrong_and_passes_once_fixed(capsys, zoo_folder, tmp_path, name, scripts, shown):
    with pytest.raises(SystemExit) as info:
        main(["audit", str(zoo_folder(name)), "--trust-remote-code", "--reproducer", str(tmp_path)])
    assert info.value.code == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == scripts
    script = tmp_path / scripts[0]
    assert (
        "loadguard" not in script.read_text().split('"""', 2)[2]
    )  # the docstring names it; the code never imports it
    broken = _run(script)
    assert broken.returncode == 1, broken.stderr[-2000:]
    assert shown in broken.stdout and "tensor(s) wrong" in broken.stdout
    fixed = _run(script, str(zoo_folder("clean")))  # the same tensors, where the model's code rebuilds them
    if name != "tensor_attribute":  # clean keeps its rotary table as a buffer: only this entry makes it an attribute
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr[-2000:]
        assert "fixed: every tensor is right" in fixed.stdout


def test_a_clean_model_gets_no_reproducer(capsys, zoo_folder, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["audit", str(zoo_folder("clean")), "--trust-remote-code", "--reproducer", str(tmp_path / "repro")])
    assert info.value.code == 0 and not (tmp_path / "repro").exists()
