"""Shared fixtures: zoo folders built once per session, quiet transformers, no network."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
import transformers  # noqa: E402

from loadguard import zoo  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TRANSFORMERS_VERSION = transformers.__version__
IS_V5 = int(TRANSFORMERS_VERSION.split(".")[0]) >= 5


@pytest.fixture(scope="session")
def zoo_folder(tmp_path_factory):
    """``zoo_folder(name, **overrides)``: the entry built once per session (per overrides) into a temp dir."""
    built: dict[tuple, object] = {}

    def get(name: str, **overrides):
        key = (name, tuple(sorted(overrides.items())))
        if key not in built:
            built[key] = zoo.build(name, tmp_path_factory.mktemp(name) / "model", **overrides)
        return built[key]

    return get


def load(folder, **kwargs):
    """A plain ``from_pretrained`` of a zoo folder, as a user would write it."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, **kwargs)
