"""A v4 model whose config.json does not say ``tie_word_embeddings`` (4.x saved only what differed from its default,
True): transformers 5's configs have no default, so the head a 4.x load tied is left as random initialization. The
audit expects 4.x's tie; ``fix`` makes the model's own config class keep 4.x's default, and the copy ties on plain 5.x.
Shaped like Falcon's remote code of 2023 (tied ``lm_head``, absent from its checkpoint)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import loadguard

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} gives every config the default")

GUARD = 'if not hasattr(self, "tie_word_embeddings"):'


def _silent_tie(zoo_folder, tmp_path: Path, *, say: bool | None) -> Path:
    """The zoo's v4 model (a v4 tie list, no post_init) tying its head, its checkpoint without ``lm_head.weight``;
    ``say``: what config.json says of ``tie_word_embeddings`` (None: nothing, as 4.x wrote it)."""
    folder = tmp_path / "silent_tie"
    shutil.copytree(zoo_folder("v4_tied_weights"), folder)
    toy = folder / "configuration_lgtoy.py"
    toy.write_text(toy.read_text().replace('kwargs.setdefault("tie_word_embeddings", False)', "pass"))
    config = json.loads((folder / "config.json").read_text())
    config.pop("tie_word_embeddings", None)
    if say is not None:
        config["tie_word_embeddings"] = say
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(folder / "model.safetensors")
    weights.pop("lm_head.weight", None)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@needs_v5
def test_fix_keeps_4x_tie_default_and_the_copy_ties_on_plain_5(zoo_folder, tmp_path):
    folder = _silent_tie(zoo_folder, tmp_path, say=None)
    model = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, workarounds="auto")
    assert torch.equal(model.lm_head.weight, model.embed_tokens.weight)  # 4.x's meaning, under the workaround
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    config_code = (tmp_path / "fixed" / "configuration_lgv4.py").read_text()
    assert GUARD in config_code and "self.tie_word_embeddings = True" in config_code
    said = {c.file: c.description for c in result.changes}
    assert "keeps transformers 4's tie_word_embeddings=True" in said["configuration_lgv4.py"]
    assert "keeps transformers 4's" not in said.get("modeling_lgv4.py", "")  # each file says what changed in it
    assert not any("lm_head.weight" in r.tensor for r in result.refused), result.refused
    fixed = loadguard.load("AutoModelForCausalLM", tmp_path / "fixed", trust_remote_code=True, poison=True)
    assert fixed.loadguard_report.workarounds == () and fixed.loadguard_report.ok
    assert torch.equal(fixed.lm_head.weight, fixed.embed_tokens.weight)


@needs_v5
def test_a_config_that_says_untied_gets_no_tie(zoo_folder, tmp_path):
    folder = _silent_tie(zoo_folder, tmp_path, say=False)
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert GUARD not in (tmp_path / "fixed" / "configuration_lgv4.py").read_text()
    assert not any("tie_word_embeddings" in c.description for c in result.changes)


def _with_base_init(folder: Path) -> None:
    """Falcon's shape: the ``XPreTrainedModel`` base gets an ``__init__`` of its own (``super().__init__`` only)."""
    toy = folder / "modeling_lgtoy.py"
    toy.write_text(
        toy.read_text().replace(
            '    base_model_prefix = "model"\n',
            '    base_model_prefix = "model"\n\n    def __init__(self, *inputs, **kwargs):\n'
            "        super().__init__(*inputs, **kwargs)\n",
            1,
        )
    )


@needs_v5
def test_a_base_class_init_gets_no_early_post_init_and_the_copy_builds_from_its_config(zoo_folder, tmp_path):
    """Falcon's shape: the ``XPreTrainedModel`` base has an ``__init__`` of its own (``super().__init__`` only), and the
    model classes build their modules after calling it. A ``post_init()`` appended there would run before those modules
    exist: with the head tied, transformers 5's ``tie_weights`` then fails building the copy from its config."""
    folder = _silent_tie(zoo_folder, tmp_path, say=None)
    _with_base_init(folder)
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert result.refused == (), result.refused
    base = (tmp_path / "fixed" / "modeling_lgtoy.py").read_text().split("class LgToyPreTrainedModel")[1]
    assert "post_init" not in base.split("def _init_weights")[0]  # nothing runs before the model's modules exist
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tmp_path / "fixed", trust_remote_code=True)
    built = AutoModelForCausalLM.from_config(config, trust_remote_code=True)  # as a user fine-tunes from scratch
    assert built.lm_head.weight is built.embed_tokens.weight


@needs_v5
def test_a_class_that_only_inherits_such_an_init_is_left_for_a_person_with_what_to_write(zoo_folder, tmp_path):
    """The same base, and a model class of the folder with no ``__init__`` of its own: its only ``__init__`` is the
    base's, which the other classes run first; nothing can be appended there, so that class is left, saying what to
    write, and the rest is fixed (``partly``)."""
    folder = _silent_tie(zoo_folder, tmp_path, say=None)
    _with_base_init(folder)
    v4 = folder / "modeling_lgv4.py"  # beside the class the load builds, as a folder's other heads are
    v4.write_text(v4.read_text() + "\n\nclass LgToyBare(LgToyPreTrainedModel):\n    pass\n")
    result = loadguard.fix(folder, tmp_path / "fixed", trust_remote_code=True, verify=False)
    assert result.status != "fixed", result.to_json()
    left = " ".join(r.reason for r in result.refused)
    assert "LgToyBare inherits LgToyPreTrainedModel.__init__, which LgToyForCausalLM, LgV4ForCausalLM run" in left
    assert "give LgToyBare an __init__ that calls super().__init__(config) and then self.post_init()" in left
    base = (tmp_path / "fixed" / "modeling_lgtoy.py").read_text().split("class LgToyPreTrainedModel")[1]
    assert "post_init" not in base.split("def _init_weights")[0]
