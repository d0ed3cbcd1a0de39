"""Workarounds registered from outside loadguard: a Python file (``--workarounds-from FILE.py``,
``load_file``); entry points of the ``loadguard.workarounds`` group are loaded with the built-ins."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from ..errors import InvalidOptionError, WorkaroundError
from ._registry import REGISTRY, load_builtins, registering_from


def load_file(path: str | Path) -> list[str]:
    """Import a Python file that registers workarounds (``@loadguard.workaround``); returns their names.

    Raises :class:`loadguard.errors.InvalidOptionError` for a missing file and
    :class:`loadguard.errors.WorkaroundError` when the file fails to import.
    """
    load_builtins()
    file = Path(path)
    if not file.is_file():
        raise InvalidOptionError(
            f"--workarounds-from {path}: no such file",
            "pass a Python file that registers workarounds with @loadguard.workaround",
        )
    resolved = file.resolve()
    module_name = "loadguard_user_workarounds_" + hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    before = dict(REGISTRY)
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        if spec is None or spec.loader is None:
            raise InvalidOptionError(f"--workarounds-from {path}: not a Python file", "pass a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        with registering_from(f"file {resolved}"):
            try:
                spec.loader.exec_module(module)
            except Exception as error:
                del sys.modules[module_name]
                raise WorkaroundError(
                    f"--workarounds-from {path} failed to import: {type(error).__name__}: {error}",
                    "fix the file (set LOADGUARD_DEBUG=1 to see the traceback)",
                ) from error
    return sorted(n for n, w in REGISTRY.items() if w.source == f"file {resolved}" or before.get(n) is not w)


__all__ = ["load_file"]
