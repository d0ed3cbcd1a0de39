"""Comparators for reference-vs-engine test suites, drop-in for the ones engine suites already use.

``check_outputs_equal`` and ``check_logprobs_close`` take the same keyword arguments, with the same
defaults and the same semantics, as the comparators inference-engine test suites use: switch by changing
an import. What they add, each behind an option so defaults stay compatible:

- ``near_tie``: at a divergence, accept it only as a near tie (each side ranks the other's token within
  ``near_tie`` of its own); the main source of bfloat16 flakes, now named instead of waved through.
- ``check_lengths``: a sequence that is a prefix of the other fails (by default lengths are not compared).
- ``check_all_positions``: check the logprobs at every position up to the divergence, not just at it
  (``always_check_logprobs=True`` keeps its compatible meaning: position 0 only).
- NaN or infinite logprobs on either side always fail, with their own message: a model with NaN logits
  argmaxes to token 0 and "agrees" with nobody for the wrong reason.

Both return a :class:`ComparisonResult` (first divergence per prompt, matched prefix) and raise
``AssertionError`` with a readable diff when they fail.

Example::

    from loadguard.compare import check_logprobs_close

    check_logprobs_close(outputs_0_lst=hf_outputs, outputs_1_lst=engine_outputs, name_0="hf", name_1="engine")
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._infra import observers

__all__ = ["ComparisonResult", "PromptComparison", "check_logprobs_close", "check_outputs_equal"]


@dataclass(frozen=True)
class PromptComparison:
    """How one prompt's two outputs compare.

    ``matched_prefix`` is the number of equal leading tokens; ``divergence`` the first position where the
    tokens differ (None when they never do over the shorter length); ``tokens`` the two tokens there.
    """

    index: int
    ok: bool
    matched_prefix: int
    divergence: int | None = None
    tokens: tuple[int, int] | None = None
    message: str = ""
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ComparisonResult:
    name_0: str
    name_1: str
    prompts: tuple[PromptComparison, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.prompts)

    @property
    def failures(self) -> tuple[PromptComparison, ...]:
        return tuple(p for p in self.prompts if not p.ok)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "name_0": self.name_0,
            "name_1": self.name_1,
            "prompts": [
                {
                    "index": p.index,
                    "ok": p.ok,
                    "matched_prefix": p.matched_prefix,
                    "divergence": p.divergence,
                    "tokens": list(p.tokens) if p.tokens else None,
                    "message": p.message,
                    "warnings": list(p.warnings),
                }
                for p in self.prompts
            ],
        }


def _matched_prefix(ids_0: Sequence[int], ids_1: Sequence[int]) -> int:
    n = 0
    for a, b in zip(ids_0, ids_1):
        if a != b:
            break
        n += 1
    return n


def _notify(kind: str, outputs_0_lst, outputs_1_lst, result: ComparisonResult, tolerance: float | None) -> None:

    observers.notify(
        "compare", kind=kind, outputs_0=outputs_0_lst, outputs_1=outputs_1_lst, result=result, tolerance=tolerance
    )


def _raise_if_failed(result: ComparisonResult) -> ComparisonResult:
    if not result.ok:
        lines = [
            f"{len(result.failures)} of {len(result.prompts)} prompt(s) differ between {result.name_0} and {result.name_1}:"
        ]
        lines += [p.message for p in result.failures]
        raise AssertionError("\n".join(lines))
    return result


def _show(ids: Sequence[int], text: str | None, at: int | None) -> str:
    if at is None:
        shown = list(ids)
    else:
        shown = [f"[{t}]" if i == at else str(t) for i, t in enumerate(ids)]
    return f"ids [{', '.join(map(str, shown))}]" + (f", text {text!r}" if text is not None else "")


def check_outputs_equal(
    *,
    outputs_0_lst: Sequence[Sequence[Any]],
    outputs_1_lst: Sequence[Sequence[Any]],
    name_0: str,
    name_1: str,
) -> ComparisonResult:
    """Every prompt's ``(ids, text)`` must be identical on both sides."""
    assert len(outputs_0_lst) == len(outputs_1_lst), (
        f"{name_0} has {len(outputs_0_lst)} outputs, {name_1} has {len(outputs_1_lst)}"
    )
    prompts = []
    for index, (out_0, out_1) in enumerate(zip(outputs_0_lst, outputs_1_lst)):
        ids_0, text_0 = list(out_0[0]), out_0[1]
        ids_1, text_1 = list(out_1[0]), out_1[1]
        prefix = _matched_prefix(ids_0, ids_1)
        same = ids_0 == ids_1 and text_0 == text_1
        divergence = prefix if prefix < max(len(ids_0), len(ids_1)) else None
        tokens = None
        if divergence is not None and divergence < min(len(ids_0), len(ids_1)):
            tokens = (ids_0[divergence], ids_1[divergence])
        message = ""
        if not same:
            where = f"at token {divergence}" if divergence is not None else "in text only"
            message = (
                f"Test{index}: outputs differ {where} (matched {prefix} tokens)\n"
                f"  {name_0}: {_show(ids_0, text_0, divergence)}\n"
                f"  {name_1}: {_show(ids_1, text_1, divergence)}"
            )
        prompts.append(PromptComparison(index, same, prefix, divergence, tokens, message))
    result = ComparisonResult(name_0, name_1, tuple(prompts))
    _notify("outputs_equal", outputs_0_lst, outputs_1_lst, result, None)
    return _raise_if_failed(result)


def _logprob(value: Any) -> float:
    return float(getattr(value, "logprob", value))


def _unpack(output: Sequence[Any]) -> tuple[list[int], str | None, list[Mapping[int, Any] | None]]:
    if len(output) == 3:
        ids, text, logprobs = output
    elif len(output) == 2:
        ids, logprobs = output
        text = None
    else:
        raise AssertionError(f"an output must be (ids, logprobs) or (ids, text, logprobs), got {len(output)} items")
    return list(ids), text, list(logprobs)


def _non_finite(logprobs: Sequence[Mapping[int, Any] | None]) -> tuple[int, int, float] | None:
    for position, step in enumerate(logprobs):
        for token, value in (step or {}).items():
            number = _logprob(value)
            if not math.isfinite(number):
                return position, token, number
    return None


def _top(step: Mapping[int, Any] | None) -> str:
    if not step:
        return "{}"
    items = sorted(((t, _logprob(v)) for t, v in step.items()), key=lambda kv: -kv[1])
    return "{" + ", ".join(f"{t}: {v:.3f}" for t, v in items) + "}"


def check_logprobs_close(
    *,
    outputs_0_lst: Sequence[Sequence[Any]],
    outputs_1_lst: Sequence[Sequence[Any]],
    name_0: str,
    name_1: str,
    num_outputs_0_skip_tokens: int = 0,
    warn_on_mismatch: bool = True,
    always_check_logprobs: bool = False,
    near_tie: float | None = None,
    check_lengths: bool = False,
    check_all_positions: bool = False,
) -> ComparisonResult:
    """Greedy outputs agree up to their first divergence, where each side's token must be among the other
    side's top logprobs; then the comparison of that prompt stops (the sequences diverge).

    Compatible semantics (kept on purpose): lengths are not compared; a difference in text alone only
    warns; ``always_check_logprobs=True`` checks position 0 only; ``num_outputs_0_skip_tokens`` drops that
    many leading tokens of side 0. Additions: see the module docstring.
    """
    assert len(outputs_0_lst) == len(outputs_1_lst), (
        f"{name_0} has {len(outputs_0_lst)} outputs, {name_1} has {len(outputs_1_lst)}"
    )
    if near_tie is not None and near_tie < 0:
        raise ValueError("near_tie is a logprob gap and must be >= 0")
    prompts = []
    for index, (out_0, out_1) in enumerate(zip(outputs_0_lst, outputs_1_lst)):
        ids_0, text_0, logprobs_0 = _unpack(out_0)
        ids_1, text_1, logprobs_1 = _unpack(out_1)
        ids_0, logprobs_0 = ids_0[num_outputs_0_skip_tokens:], logprobs_0[num_outputs_0_skip_tokens:]
        prefix = _matched_prefix(ids_0, ids_1)
        header = f"Test{index}:"
        both = (f"  {name_0}: {_show(ids_0, text_0, None)}", f"  {name_1}: {_show(ids_1, text_1, None)}")

        bad = [
            (name, found) for name, lp in ((name_0, logprobs_0), (name_1, logprobs_1)) if (found := _non_finite(lp))
        ]
        if bad:
            name, (position, token, value) = bad[0]
            message = (
                f"{header} {name} has a non-finite logprob ({value}) for token {token} at position {position}: "
                "the model's output is NaN/Inf, not a token choice (audit its load: `loadguard audit PATH`, or loadguard.audit(model))\n"
                + "\n".join(both)
            )
            prompts.append(PromptComparison(index, False, prefix, None, None, message))
            continue

        shorter = min(len(ids_0), len(ids_1))
        divergence = prefix if prefix < shorter else None
        tokens = (ids_0[prefix], ids_1[prefix]) if divergence is not None else None
        failure, notes = "", []
        for position, (tok_0, tok_1) in enumerate(zip(ids_0, ids_1)):
            mismatch = tok_0 != tok_1
            if not (mismatch or always_check_logprobs or check_all_positions):
                continue
            step_0 = logprobs_0[position] if position < len(logprobs_0) else None
            step_1 = logprobs_1[position] if position < len(logprobs_1) else None
            where = (
                f"{header} at position {position}: {name_0} chose {tok_0}, {name_1} chose {tok_1} (matched {prefix} tokens)\n"
                f"  {name_0} top logprobs: {_top(step_0)}\n  {name_1} top logprobs: {_top(step_1)}"
            )
            if step_0 is None or step_1 is None:
                failure = f"{where}\n  a side has no logprobs at this position"
            elif tok_0 not in step_1 or tok_1 not in step_0:
                missing = tok_0 if tok_0 not in step_1 else tok_1
                failure = f"{where}\n  token {missing} is not in the other side's top {len(step_1 if missing == tok_0 else step_0)}"
            elif mismatch and near_tie is not None:
                gap_0 = _logprob(step_0[tok_0]) - _logprob(step_0[tok_1])
                gap_1 = _logprob(step_1[tok_1]) - _logprob(step_1[tok_0])
                if max(gap_0, gap_1) > near_tie:
                    failure = f"{where}\n  not a near tie: logprob gaps {gap_0:.4f} ({name_0}) and {gap_1:.4f} ({name_1}) exceed near_tie={near_tie}"
                else:
                    notes.append(
                        f"{header} near tie at position {position} (gaps {gap_0:.4f}, {gap_1:.4f} <= {near_tie})"
                    )
            if failure:
                break
            if mismatch:
                if warn_on_mismatch:
                    notes.append(where)
                break
            if always_check_logprobs and not check_all_positions:
                break  # compatible semantics: only position 0 is checked
        else:
            if check_lengths and len(ids_0) != len(ids_1):
                failure = (
                    f"{header} lengths differ: {name_0} has {len(ids_0)} tokens, {name_1} has {len(ids_1)} (one is a prefix of the other)\n"
                    + "\n".join(both)
                )
            elif text_0 is not None and text_1 is not None and text_0 != text_1 and warn_on_mismatch:
                notes.append(f"{header} same tokens, different text: {name_0} {text_0!r}, {name_1} {text_1!r}")
        for note in notes:
            if warn_on_mismatch:
                warnings.warn(note, stacklevel=2)
        prompts.append(PromptComparison(index, not failure, prefix, divergence, tokens, failure, tuple(notes)))
    result = ComparisonResult(name_0, name_1, tuple(prompts))
    _notify("logprobs_close", outputs_0_lst, outputs_1_lst, result, near_tie)
    return _raise_if_failed(result)
