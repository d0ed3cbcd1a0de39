"""Proof (c) of ``loadguard fix``: the patched copy on the running transformers answers as the original answered on the
transformers 4 proof (b) ran on. Same weights, same inputs (:mod:`loadguard._hf.inputs`, built from the config): the
logits (hidden states, for a model without them) within the dtype's tolerance, every position's greedy token among
the other side's top logprobs (``check_logprobs_close``'s semantics), and the greedy tokens of a generative model
identical. A side that could not run says why; nothing is "not compared" silently."""

from __future__ import annotations

from typing import Any

from .. import compare
from .._hf import describe_crash
from .._infra import collapse_names, plural
from .proofs import Proof

TOLERANCE = {"float64": 1e-6, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
"""Largest |difference| of log-probabilities (of values, relative to their scale, for hidden states) accepted between
the two releases, by the dtype the model ran in: kernels may differ between releases, a wrong tensor moves more."""
TOP = 5


def _top(logprobs, k: int = TOP) -> list[tuple[list[int], None, list[dict[int, float]]]]:
    """Per batch row, teacher-forced: the argmax at every position and the top ``k`` logprobs there, as the
    comparators of :mod:`loadguard.compare` take them."""
    rows = []
    for row in logprobs:
        values, indices = row.topk(min(k, row.shape[-1]), dim=-1)
        steps = [dict(zip(i.tolist(), v.tolist())) for i, v in zip(indices, values)]
        rows.append((indices[:, 0].tolist(), None, steps))
    return rows


def _largest(first, second) -> float:
    difference = (first - second).abs()
    return float(difference.nan_to_num(float("inf")).max()) if difference.numel() else 0.0


def compare_outputs(
    before: dict[str, Any], after: dict[str, Any], old: str, new: str
) -> tuple[bool | None, str, dict]:
    """``(ok, detail, measured)`` for the original's outputs on ``old`` (``before``) against the patched copy's on
    ``new`` (``after``), both as :func:`loadguard._hf.inputs.model_outputs` gives them. ``ok`` None: nothing to compare
    against (the original cannot run there either, or inputs could not be built), the detail says which."""
    import torch

    measured: dict[str, Any] = {
        "inputs": before.get("inputs", []),
        "dtype": after.get("dtype"),
        "part": after.get("part"),
    }
    if before.get("part") != after.get("part"):
        return (
            None,
            f"not compared: the sub-models run differ ({before.get('part')!r} on {old}, {after.get('part')!r} on {new})",
            measured,
        )
    missing = sorted(set(before.get("missing") or []) | set(after.get("missing") or []))
    if missing:
        return (
            None,
            f"not compared: its forward requires {', '.join(missing)}, which cannot be built from its config",
            measured,
        )
    if after.get("error") and not before.get("error"):
        return False, f"on transformers {new} the patched copy's {describe_crash(after['error'])}", measured
    if before.get("error"):
        side = f"the original's {describe_crash(before['error'])}"
        if after.get("error"):  # nothing to hold the copy to: the original does not run where it was written either
            both = f"on {old} {side}; on {new} {describe_crash(after['error'])}"
            return None, f"not compared: it does not run on either release: {both}", measured
        return None, f"not compared: on transformers {old} {side}", measured
    for side, seen, release in (("original", before, old), ("patched copy", after, new)):
        if seen.get("unsteady") is not None:  # two runs of one model disagree: no other run can be held to it
            return (
                None,
                f"not compared: the {side}'s outputs on transformers {release} differ between two runs of the same "
                f"inputs (max |diff| {seen['unsteady']:.3g}: a forward that adds noise, or dropout left on)",
                measured,
            )
    first, second = before.get("values"), after.get("values")
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor):
        return None, f"not compared: its forward returns {after.get('kind') or 'no tensor'}", measured
    if not first.numel() or not second.numel():  # nothing to hold against anything: never a pass
        return None, f"not compared: its {after.get('kind') or 'output'} hold no values", measured
    if first.shape != second.shape:
        return (
            False,
            f"{after['kind']} of shape {tuple(second.shape)} on {new}, {tuple(first.shape)} on {old}",
            measured,
        )
    if not torch.isfinite(
        first
    ).all():  # a degenerate checkpoint: the original itself answers NaN where it was written
        return (
            None,
            f"not compared: the original's {after['kind']} on transformers {old} hold NaN or Inf already (the patched "
            f"copy's on {new}: {'finite' if torch.isfinite(second).all() else 'too'})",
            measured,
        )
    if not torch.isfinite(second).all():
        return (
            False,
            f"the patched copy's {after['kind']} on {new} hold NaN or Inf (the original's on {old}: finite)",
            measured,
        )
    tolerance = TOLERANCE.get(str(after.get("dtype")), TOLERANCE["float32"])
    logits = after.get("kind") == "logits"
    if logits:
        first, second = first.log_softmax(-1), second.log_softmax(-1)
        largest = _largest(first, second)
    else:
        largest = _largest(first, second) / max(1.0, float(first.abs().max()))
    measured.update(max_abs_diff=largest, tolerance=tolerance, positions=int(first.shape[0] * first.shape[1]))
    what = "log-probabilities" if logits else f"{after['kind']} (relative to their scale)"
    problems = []
    if largest > tolerance:
        problems.append(f"{what} differ by up to {largest:.3g} (> {tolerance:g} for {after.get('dtype')})")
    if logits and first.dim() == 3:
        try:
            compare.check_logprobs_close(
                outputs_0_lst=_top(first),
                outputs_1_lst=_top(second),
                name_0=f"original on {old}",
                name_1=f"patched on {new}",
                warn_on_mismatch=False,
                check_all_positions=True,
            )
        except AssertionError as error:
            problems.append(f"top-{TOP} logprobs disagree: {str(error).splitlines()[1].strip()}")
    tokens_before, tokens_after = before.get("tokens"), after.get("tokens")
    measured.update(tokens_original=tokens_before, tokens_patched=tokens_after)
    if tokens_before is not None and tokens_after is None:
        problems.append(f"the patched copy did not generate on {new} ({after.get('generate') or 'no tokens'})")
    elif tokens_before is not None and tokens_before != tokens_after:
        at = next(i for i, (a, b) in enumerate(zip(tokens_before + [None], tokens_after + [None])) if a != b)
        problems.append(f"greedy tokens differ from position {at}: {tokens_after} on {new}, {tokens_before} on {old}")
    if problems:
        return False, "; ".join(problems), measured
    generated = (
        f"; its {plural(len(tokens_before), 'greedy token')} are the same ({', '.join(map(str, tokens_before))})"
        if tokens_before is not None
        else f"; no tokens compared: {before.get('generate') or after.get('generate') or 'not generative'}"
    )
    return (
        True,
        f"on transformers {new} the patched copy's {what} equal the original's on {old} within {tolerance:g} "
        f"(max |diff| {largest:.3g}, {after.get('dtype')}, {measured['positions']} positions; inputs "
        + ("from the model's own tokenizer" if after.get("ids") else "built from the config")
        + f": {', '.join(measured['inputs'])}){generated}",
        measured,
    )


def same_outputs(
    before: dict | None,
    after: dict | str,
    old: str,
    new: str,
    weightless: bool = False,
    changed: tuple[str, ...] = (),
) -> Proof:
    """(c) as a proof row: ``before`` the original's outputs on ``old`` (proof (b)'s release; None: it took none),
    ``after`` the patched copy's on ``new`` (a string: why there are none)."""
    name = "same_outputs"
    if isinstance(after, str):
        return Proof(name, new, None, f"not run: {after}", weightless)
    if before is None:
        return Proof(
            name, new, None, f"not run: proof (b) took no outputs of the original on transformers {old}", weightless
        )
    unbuilt = before.get("not_built") or after.get("not_built")
    if unbuilt:
        return Proof(name, f"{new} vs {old}", None, f"not run: without weights, {unbuilt}", weightless)
    if before.get("shrunk") != after.get("shrunk"):  # the two releases read the config's sizes apart
        return Proof(
            name,
            f"{new} vs {old}",
            None,
            f"not compared: without weights the two sides were shrunk apart (on {old}: {before.get('shrunk') or 'not'}; "
            f"on {new}: {after.get('shrunk') or 'not'})",
            weightless,
        )
    ok, detail, measured = compare_outputs(before, after, old, new)
    notes = (
        ["no checkpoint: both built from the config, every parameter given the same synthetic values on both sides"]
        if weightless
        else []
    )
    if after.get("shrunk"):
        notes.append(f"both {after['shrunk']}")
    if after.get("part") and before.get("part") == after.get("part"):
        outside = [t for t in changed if not t.startswith(f"{after['part']}.")]
        notes.append(
            f"compared on its sub-model {after['part']} alone: the whole model's forward requires "
            f"{', '.join(after.get('whole_missing') or [])}, which cannot be built from its config"
            + (f"; the changed {', '.join(collapse_names(outside))} lie outside it" if outside else "")
        )
        if ok and changed and len(outside) == len(changed):  # what it ran holds none of what changed: no proof of it
            ok, detail = None, f"not compared for the change: what ran holds no changed tensor ({detail})"
    if before.get("set_like_code"):
        notes.append(
            f"the original's outputs on {old} taken with {plural(len(before['set_like_code']), 'tensor')} it loads "
            "wrong there too set as its code computes them"
        )
    if after.get("set_by_hand"):
        notes.append(
            f"the patched copy's with {plural(len(after['set_by_hand']), 'refused tensor')} set as its code computes "
            "them (what the change leaves for a person)"
        )
    detail += f" ({'; '.join(notes)})" if notes else ""
    return Proof(name, f"{new} vs {old}", ok, detail, weightless, measured)


__all__ = ["TOLERANCE", "compare_outputs", "same_outputs"]
