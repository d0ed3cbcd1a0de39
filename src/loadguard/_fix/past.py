"""v4 code past the load: what a model's files call when it runs (``forward``, ``generate``) or is saved, which a load
never meets. ``loadguard fix`` writes the source fix of each workaround that gives such a thing back, once the files
call what this transformers lacks and the model is seen to break."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from .. import workarounds as registry
from .._codemod import Refused
from .._hf import model_outputs, synthetic


def needed_past_the_load(plan: Any, needed: tuple[str, ...], model: Any) -> list[str]:
    """The workarounds for v4 code that only breaks when it runs (in ``forward``, in ``generate``: the load never meets
    it) that the model's files need: they call what the workaround gives back (``touches``) and the running
    transformers does not have it (``native`` false), and its source fix finds that call to change (or refuses, naming
    the line). Proof (c) then runs the patched copy on this transformers."""
    sources = {name: text for name, text in plan.original.items()}
    code = "\n".join(text for name, text in sources.items() if name.endswith(".py"))
    config = {"_name_or_path": "", **json.loads(sources.get("config.json") or "{}")}
    found = []
    for name in registry.PAST_THE_LOAD:
        item = registry.get(name)
        if (
            name in needed
            or item.is_native()
            or not (item.touches and item.touches([code]))
            or not item.applies(config)
        ):
            continue
        try:
            changed, _ = item.source_fix(sources, config, model)
        except Refused:  # a use it cannot rewrite: the plan says so, with its line
            changed = {"": ""}
        if changed:
            found.append(name)
    return found


def breaks_when_run(model: Any, folder: Path, weightless: bool, late: list[str]) -> bool:
    """Whether the model, whose load is right, fails when it runs here (one forward pass and greedy tokens on inputs
    built from its config) with a failure one of ``late`` declares, or (:data:`SAVED`) when it is saved. Without weights it runs built from its config with
    synthetic values; one that cannot be built so (too big, or its construction fails here) is taken at its files'
    word, and proof (c) decides."""
    if weightless:
        try:
            model, _ = synthetic(str(folder))
        except Exception:  # noqa: BLE001  (it does not build here: proof (c) decides)
            model = None
        if model is None:
            return True
    if SAVED & set(late) and not saves(model):
        return True
    crash = model_outputs(model, fixes=registry.fixes_for)["error"]
    return crash is not None and bool(set(crash.get("fixes") or ()) & set(late))


SAVED = frozenset({"v4-tied-weights-keys"})
"""The workarounds for v4 code met when the model is saved, not when it runs."""


def saves(model: Any) -> bool:
    """Whether ``save_pretrained`` of the model gets past what it reads of the model's code (its tie declarations), as
    seen by saving an empty state dict (nothing written but the config and code)."""
    with tempfile.TemporaryDirectory(prefix="loadguard-saves-") as folder:
        try:
            model.save_pretrained(folder, state_dict={})
        except Exception:  # noqa: BLE001  (the model's declarations break the save: what this asks)
            return False
    return True


__all__ = ["breaks_when_run", "needed_past_the_load"]
