"""A model's config as data: its config.json, its folder, a dict to look things up in. Pure helpers, no loadguard
imports: the workarounds, the reference and the loaders all read configs through them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def local_config(path: Any) -> dict | None:
    """The config.json of a local model folder as a dict; None where ``path`` is no folder holding a readable one
    (a Hub id, a missing or broken file: the callers fall back, :func:`read_config` is the one that says why)."""
    if path is None:
        return None
    try:
        config = json.loads((Path(str(path)) / "config.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return config if isinstance(config, dict) else None


def config_dict(config: Any) -> dict:
    """A loaded config as a dict to look things up in (``model_type``, ``architectures``, ``auto_map``, ...): its
    ``to_dict()``, or, where a model's own config class breaks that (it raises, or returns something else), its
    attributes. Never raises: a config is the model author's code."""
    if config is None:
        return {}
    try:
        document = config.to_dict()
        if isinstance(document, dict):
            return document
    except Exception:  # the model's own to_dict: whatever it raises, the attributes are still there
        pass
    try:
        document = {k: v for k, v in vars(config).items() if isinstance(k, str) and not k.startswith("__")}
    except TypeError:
        document = {}
    document.setdefault("model_type", getattr(type(config), "model_type", None))
    return document


def folder_of(config: Any) -> Path | None:
    """The local folder a config was read from (its ``_name_or_path``), when it is one."""
    name = str(getattr(config, "_name_or_path", "") or "")
    return Path(name) if name and Path(name).is_dir() else None


__all__ = ["config_dict", "folder_of", "local_config"]
