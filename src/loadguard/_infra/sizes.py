"""Sizes as users type them (``--memory-limit``, ``memory-limit`` in ``[tool.loadguard]``): ``8GB``, ``2G``, ``2GiB``,
``2048M``, ``512MiB``, ``1.5GB``, a plain number of bytes.

``KB``/``MB``/``GB``/``TB`` are powers of 1000 (as accelerate and the Hub count them); ``KiB``/``MiB``/``GiB``/``TiB``
and the bare letters ``K``/``M``/``G``/``T`` (as ``ulimit``, ``sort -S`` and docker read them) are powers of 1024.
"""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(i?b|)|(b?))\s*$", re.IGNORECASE)
_POWER = {"k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str) -> int | None:
    """Bytes, or None when ``text`` is not a positive size."""
    match = _SIZE.match(str(text))
    if not match:
        return None
    number, unit, suffix, _ = match.groups()
    value = float(number)
    if unit:
        base = 1000 if suffix.lower() == "b" else 1024
        value *= base ** _POWER[unit.lower()]
    if not math.isfinite(value) or value < 1:
        return None
    return int(value)


__all__ = ["parse_size"]
