"""Where code lives, said so a user can open it: a remote-code file relative to the model's folder, a transformers
file relative to the installed package, anything else as its path."""

from __future__ import annotations

import os
import re

# transformers copies a remote-code model's files to HF_MODULES_CACHE/transformers_modules/<folder>/<hash>/<file>
_REMOTE = re.compile(r"[\\/]transformers_modules[\\/](?:[^\\/]+[\\/])+?(?:[0-9a-f]{6,64}[\\/])(?P<file>.+)$")


def source_path(filename: str) -> str:
    """``modeling_x.py`` for a remote-code module (the name it has in the model's folder),
    ``transformers/models/clip/modeling_clip.py`` for transformers' own code, else ``filename`` unchanged."""
    match = _REMOTE.search(filename)
    if match:
        return match.group("file").replace(os.sep, "/")
    normalized = filename.replace(os.sep, "/")
    for package in ("/transformers/", "/torch/", "/accelerate/"):
        at = normalized.rfind(package)
        if at != -1:
            return normalized[at + 1 :]
    return filename


def located(filename: str, line: int) -> str:
    """``file:line`` as :func:`source_path` names the file."""
    return f"{source_path(filename)}:{line}"


__all__ = ["located", "source_path"]
