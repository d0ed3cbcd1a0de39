"""A module's code runs, then ours, the moment it is first imported: how the pytest plugin patches transformers only
in runs that import it, and how ``v4-module-names`` gives modules back their removed names as they are imported."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable


class AfterImport(importlib.abc.MetaPathFinder):
    """On ``sys.meta_path`` (first), calls ``callback(module)`` right after a module ``wanted(name)`` is imported."""

    def __init__(self, wanted: Callable[[str], bool], callback: Callable):
        self.wanted, self.callback = wanted, callback

    def find_spec(self, fullname, path=None, target=None):
        if not self.wanted(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        execute, callback = spec.loader.exec_module, self.callback

        def exec_module(module):
            execute(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec

    def install(self) -> AfterImport:
        sys.meta_path.insert(0, self)
        return self

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


__all__ = ["AfterImport"]
