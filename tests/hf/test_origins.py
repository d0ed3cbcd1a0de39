"""Every finding is located in code: the line that made the tensor (recorded while the reference is constructed), or
the line that wrote a loaded weight after loading; remote code relative to the model's folder, transformers' own as
``transformers/models/...``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import loadguard
from loadguard._hf.origins import named, recording
from loadguard._infra.locations import source_path

from ..conftest import IS_V5, TRANSFORMERS_VERSION, load

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(3), persistent=False)  # line A
        self.plain = torch.ones(2)  # line B


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.proj = nn.Linear(2, 2)  # line C: the Linear's weight and bias are made here, for this code


def _line_of(text: str) -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line)


def test_recording_names_the_line_that_made_each_tensor():
    sites: dict = {}
    with recording(sites):
        model = Outer()
    origins = named(model, sites)
    here = Path(__file__).name
    assert origins["inner.table"] == f"{source_path(__file__)}:{_line_of('# line A')}"
    assert origins["inner.plain"].endswith(f"{here}:{_line_of('# line B')}")
    assert origins["proj.weight"].endswith(f"{here}:{_line_of('# line C')}")
    assert origins["proj.bias"] == origins["proj.weight"]
    assert nn.Module.__setattr__ is not None and "recorded" not in nn.Module.__setattr__.__name__  # put back


def test_nothing_is_recorded_outside_the_block():
    sites: dict = {}
    with recording(sites):
        pass
    Outer()
    assert sites == {}


def _line(folder: Path, location: str) -> str:
    file, line = location.rsplit(":", 1)
    return (folder / file).read_text().splitlines()[int(line) - 1]


@needs_v5
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "np_buffer",
            {
                "positions.index": 'register_buffer("index"',
                "positions.table": 'register_buffer("table"',
                "layers.0.attn.causal_mask": "register_buffer(",
            },
        ),
        ("tensor_attribute", {"positions.inv_freq": "self.inv_freq ="}),
        ("missing_key", {"logit_scale": "logit_scale"}),
        ("overwritten", {"lm_head.weight": "normal_("}),  # the line that wrote it after loading, not where it was made
    ],
)
def test_audit_and_scan_locate_findings_in_the_models_folder(zoo_folder, name, expected):
    folder = Path(zoo_folder(name))
    with loadguard.poison():  # leftover memory never passes for a value (a freed copy of the right arange did once)
        model = load(folder)
    audited = loadguard.audit(model, folder)
    scanned = loadguard.scan(folder, trust_remote_code=True)
    for report in (audited, scanned):
        located = {f.tensor: f.location for f in report.failures}
        for tensor, text in expected.items():
            assert located[tensor] is not None and not located[tensor].startswith("/"), (report.mode, tensor)
            assert text in _line(folder, located[tensor]), (report.mode, tensor, located[tensor])
        assert all(
            f.to_dict()["location"] == f.location and f.to_dict()["module"] == f.module for f in report.findings
        )


@needs_v5
def test_a_native_class_is_located_in_transformers_source(tmp_path):
    from transformers import CLIPConfig, CLIPModel

    from ..conftest import _native_models

    clip, _ = _native_models()["clip"]
    state = {k: v for k, v in clip.state_dict().items() if k != "logit_scale"}
    clip.save_pretrained(tmp_path, state_dict=state)
    model = CLIPModel.from_pretrained(tmp_path)
    (finding,) = [f for f in loadguard.audit(model, tmp_path).failures if f.tensor == "logit_scale"]
    assert finding.location.startswith("transformers/models/clip/modeling_clip.py:")
    root = Path(importlib.import_module("transformers").__file__).parent.parent
    assert "logit_scale" in _line(root, finding.location)
    assert isinstance(CLIPConfig, type)


def test_json_keeps_the_location(zoo_folder, capsys):
    from loadguard.cli import main

    with pytest.raises(SystemExit):
        main(["audit", str(zoo_folder("clean")), "--trust-remote-code", "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert all("location" in f and "module" in f for f in document["findings"])
