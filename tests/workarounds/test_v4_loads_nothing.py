"""Code that cannot load on transformers 5 at all (issue 59, part 1): names 5.x removed (and removed before 4.57, or with
the whole module), star imports that no longer bring what 4.x's did, a bare assert on ``rope_scaling``. Each is a
workaround ``auto`` finds from the failure, and a source fix ``fix`` writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import loadguard
from loadguard._fix.checks import compiles, lint_parity

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} has these names")

REMOVED = '''
from transformers.utils import LossKwargs
from transformers.pytorch_utils import prune_conv1d_layer
from transformers.utils.model_parallel_utils import assert_device_map, get_device_map
from transformers import top_k_top_p_filtering


def spread(layers, devices):
    """Model parallelism the 4.x way: a path no load runs."""
    device_map = get_device_map(layers, devices)
    assert_device_map(device_map, layers)
    return device_map, prune_conv1d_layer, top_k_top_p_filtering, LossKwargs
'''
STAR = """
from transformers.models.bert.modeling_bert import *  # noqa: F403

EMBEDDINGS = BertEmbeddings  # noqa: F405
LOGGER = logging.get_logger(__name__)  # noqa: F405  (a module the 4.x star import brought too)
"""
ROPE = "        assert config.rope_scaling is None\n"


def _variant(zoo_folder, tmp_path: Path, name: str, code: str, before: str | None = None) -> Path:
    folder = tmp_path / f"lg_{name}"
    entry, file = (
        ("v4_rope_scaling", "modeling_lgv4rope.py") if name == "rope_assert" else ("np_buffer", "modeling_lgtoy.py")
    )
    shutil.copytree(zoo_folder(entry), folder)
    modeling = folder / file
    text = modeling.read_text()
    if before is None:
        text = text.replace("\nclass ", code + "\n\nclass ", 1)
    else:
        assert before in text
        text = text.replace(before, before + code, 1)
    modeling.write_text(text)
    return folder


CASES = {
    "removed_names": (REMOVED, None, "v4-module-names", "ImportError"),
    "star_import": (STAR, None, "v4-star-imports", "NameError"),
    "rope_assert": (
        ROPE,
        "    def __init__(self, config):\n        super().__init__(config)\n",
        "v4-rope-scaling",
        "AssertionError",
    ),
}


@needs_v5
@pytest.mark.parametrize("case", sorted(CASES))
def test_code_that_cannot_load_on_5_loads_with_auto_and_gets_its_source_fix(zoo_folder, tmp_path, case):
    code, before, workaround, error = CASES[case]
    folder = _variant(zoo_folder, tmp_path, case, code, before)
    with pytest.raises(loadguard.LoadguardError) as failed:
        loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, on_problem="warn")
    assert workaround in failed.value.fixes and error in failed.value.message
    model = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, workarounds="auto")
    applied = {w.name: w.status for w in model.loadguard_report.workarounds}
    assert applied.get(workaround) == "applied", applied
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert workaround in result.workarounds and result.status == "unverified", result.to_json()
    patched = {p.name: p.read_text() for p in (tmp_path / "fixed").glob("*.py")}
    original = {p.name: p.read_text() for p in folder.glob("*.py")}
    assert compiles(patched).ok and lint_parity(original, patched).ok
    fixed = loadguard.load("AutoModelForCausalLM", tmp_path / "fixed", trust_remote_code=True, on_problem="warn")
    assert fixed.loadguard_report.workarounds == ()  # the copy loads with none


@needs_v5
def test_the_star_import_source_fix_binds_modules_from_where_they_live(zoo_folder, tmp_path):
    """4.x's star import brought the module's own imports too (``logging``): the source fix imports
    ``transformers.utils.logging as logging``, and the layer class from the native module by name."""
    folder = _variant(zoo_folder, tmp_path, "star_import", STAR, None)
    sources = {p.name: p.read_text() for p in folder.glob("*.py")}
    edited, description = loadguard.workarounds.get("v4-star-imports").source_fix(sources, {}, None)
    text = edited["modeling_lgtoy.py"]
    star = "from transformers.models.bert.modeling_bert import *  # noqa: F403\n"
    assert (
        star + "import transformers.utils.logging as logging\n"
        "from transformers.models.bert.modeling_bert import BertEmbeddings\n"
    ) in text
    assert "BertEmbeddings, logging" in description
