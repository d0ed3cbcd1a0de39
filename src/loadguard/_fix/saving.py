"""The copy a user fine-tunes and saves: ``save_pretrained`` of the fixed copy as loaded (without weights: built from
its config with synthetic values), then a plain ``from_pretrained`` of what it wrote, no workaround, every tensor
compared with the one saved. Run in proof (a)'s process (:mod:`loadguard._fix.proofs`)."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from .._audit import load_unaudited
from .._hf import synthetic
from .._infra import plural
from ..errors import LoadguardError
from .prove import same_bits


def _same_tensors(first: Any, second: Any, leave: set[str]) -> list[str]:
    """The parameters and buffers (non-persistent ones too) whose values differ between two models, bit for bit (a NaN
    equal to the same NaN); ``leave``: names not compared."""
    mine = dict(first.named_parameters(remove_duplicate=False)) | dict(first.named_buffers(remove_duplicate=False))
    theirs = dict(second.named_parameters(remove_duplicate=False)) | dict(second.named_buffers(remove_duplicate=False))
    differ = sorted(set(mine) ^ set(theirs) - leave)
    for name in sorted(set(mine) & set(theirs) - leave):
        a, b = mine[name], theirs[name]
        if a.is_meta or b.is_meta:
            if a.is_meta != b.is_meta:
                differ.append(name)
            continue
        if a.shape != b.shape or a.dtype != b.dtype or not same_bits(a.cpu(), b.cpu()):
            differ.append(name)
    return differ


def saves_and_reloads(model: Any, auto_class: str | None, still_wrong: set[str]) -> dict:
    """What a user who fine-tunes does with the fixed copy: ``save_pretrained`` of the model as loaded, then
    ``from_pretrained`` of what it wrote (its code with it, no workaround), every tensor compared with the one saved
    (those ``still_wrong`` after the patch left out)."""
    start = time.perf_counter()
    found = _round_trip(model, auto_class, still_wrong)
    return {**found, "seconds": round(time.perf_counter() - start, 3)}


def _round_trip(model: Any, auto_class: str | None, still_wrong: set[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="loadguard-saved-") as folder:
        try:
            model.save_pretrained(folder)
        except Exception as error:  # noqa: BLE001  (the copy's own save: the check reports it)
            return {"ok": False, "detail": f"save_pretrained of the fixed copy fails: {_first_line(error)}"}
        try:
            again, _ = load_unaudited(auto_class, folder, poison=True, workarounds=(), trust_remote_code=True)
        except LoadguardError as error:
            return {"ok": False, "detail": f"what save_pretrained wrote does not load again: {error.message}"}
        differ = _same_tensors(model, again, still_wrong)
    if differ:
        return {
            "ok": False,
            "detail": f"saved and loaded again, {plural(len(differ), 'tensor')} differ: {', '.join(differ[:6])}",
        }
    count = len(dict(model.named_parameters(remove_duplicate=False))) + len(
        dict(model.named_buffers(remove_duplicate=False))
    )
    left = f" ({plural(len(still_wrong), 'tensor')} left for a person not compared)" if still_wrong else ""
    return {
        "ok": True,
        "detail": f"save_pretrained, then from_pretrained of what it wrote with no workaround: {count} tensors "
        f"bit-identical{left}",
    }


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def synthetic_saves(folder: str, class_name: str | None, auto_class: str | None) -> dict:
    """Without weights, the save-and-reload check on the copy built from its config with synthetic values."""
    try:
        model, why = synthetic(folder, class_name)
    except Exception as error:  # noqa: BLE001  (its construction failed: the check cannot run)
        return {"ok": None, "detail": f"not run: the copy could not be built from its config ({_first_line(error)})"}
    if model is None:
        return {"ok": None, "detail": f"not run: {why}"}
    checked = saves_and_reloads(model, auto_class, set())
    return {**checked, "detail": f"{checked['detail']} ({why})"} if why else checked


__all__ = ["saves_and_reloads", "synthetic_saves"]
