"""A tiny in-process event hook: loads and comparisons tell whoever listens (the pytest plugin).

Nothing listens unless someone calls :func:`listen`; notifying costs a list lookup.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

_listeners: list[Callable[[str, dict[str, Any]], None]] = []

# Set while loadguard itself runs a from_pretrained and audits it: outer hooks must not audit it again.
inside_load: contextvars.ContextVar[bool] = contextvars.ContextVar("loadguard_inside_load", default=False)


def listen(callback: Callable[[str, dict[str, Any]], None]) -> Callable[[], None]:
    """Register ``callback(event, payload)``; returns the function that unregisters it."""
    _listeners.append(callback)
    return lambda: _listeners.remove(callback) if callback in _listeners else None


# Set while loadguard works for itself (the scan's self-check): its loads are nobody's business.
silenced: contextvars.ContextVar[bool] = contextvars.ContextVar("loadguard_silenced", default=False)


def notify(event: str, **payload: Any) -> None:
    if silenced.get():
        return
    for callback in list(_listeners):
        callback(event, payload)
