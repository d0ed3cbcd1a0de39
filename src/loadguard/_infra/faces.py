"""A room's face: the one way into a package of loadguard's, which names what the room offers and loads a module of it
only when one of its names is first used, so entering a room costs what is used of it (``loadguard --help`` and a
mistyped path import no torch, however many rooms the command module names).

A face is an ``__init__.py`` that says::

    __getattr__, __dir__, __all__ = lazy_face(__name__, {
        "checks": ("Check", "garbage"),     # module -> the names other rooms take from it
    }, modules=("ties",))                  # modules other rooms use whole, as a namespace

``tests/test_layers.py`` reads these two literals: another room imports only what they name.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable


def lazy_face(
    package: str, names: dict[str, Iterable[str]], modules: Iterable[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of the room ``package``: ``names`` maps each of its modules to
    the names it offers, ``modules`` the modules offered whole."""
    where = {name: module for module, offered in names.items() for name in offered}
    whole = set(modules)
    clashes = sorted(set(where) & (set(names) | whole))
    if clashes:  # the import system binds a submodule on its package under its own name, over the name we offer
        raise ValueError(f"{package}: offered names that are also module names: {', '.join(clashes)}")
    room = sys.modules[package]

    def __getattr__(name: str) -> object:
        if name in whole:
            value = importlib.import_module(f"{package}.{name}")
        elif name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(room, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(room)) | set(where) | whole)

    return __getattr__, __dir__, sorted(set(where) | whole)


__all__ = ["lazy_face"]
