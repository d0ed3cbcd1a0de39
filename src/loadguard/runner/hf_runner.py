"""``HfRunner``: the Hugging Face reference side of an engine test suite, with every load audited."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from .. import _audit, _hf
from .. import workarounds as registry
from .._audit import audit as run_audit
from .._audit import load as guarded_load
from .._audit import load_unaudited
from ..errors import InvalidOptionError, LoadguardError, RunnerConsistencyError
from ..report import AuditReport, RepairResult
from ._attention import run_model
from ._outputs import last_hidden, new_tokens, to_device
from .crash import crash_note

POLICIES = ("repair", "raise", "warn", "off")
TokensText = tuple[list[int], str]
TokensTextLogprobs = tuple[list[int], str, list[dict[int, float]]]


class HfRunner:
    """Load a model, its tokenizer and processor the way engine suites do; audit the load.

    Args:
        model: a local folder (or whatever ``from_pretrained`` takes).
        dtype: ``"auto"``, ``"float32"``, ``"bfloat16"``, ``"float16"`` or a ``torch.dtype``.
        auto_cls: the auto class or model class (default: the one the config names).
        trust_remote_code: passed to every ``from_pretrained`` (never implied).
        model_kwargs: extra ``from_pretrained`` arguments for the model.
        audit: ``"repair"`` (repair what the audit finds; raise if something stays broken), ``"raise"``
            (raise :class:`loadguard.BrokenModelError`), ``"warn"`` or ``"off"``.
        patches: callables ``runner -> runner`` applied after loading, as engine suites patch per model.
        poison: load under :func:`loadguard.poison`.
        workarounds: registered workarounds to apply (``loadguard workarounds list``), any stage;
            ``"auto"`` also applies the ``before_import`` ones whose declared failure the load hits.
        strict_stale: a stale workaround raises instead of being reported.
        auto_workarounds: also apply the registered ``runner``-stage workarounds that apply to this model
            (the per-model runner patches engine suites keep).
        device_map, max_memory, offload_folder: as ``from_pretrained`` takes them (offloaded tensors are audited
            as accelerate's hooks load them, and repaired there).

    ``runner.report`` is the audit of the load (None with ``audit="off"``), ``runner.repair`` the repair,
    ``runner.workarounds`` what every workaround did (also in ``runner.report.workarounds``).

    Example::

        with HfRunner(path, trust_remote_code=True) as hf:
            outputs = hf.generate_greedy_logprobs_limit(prompts, max_tokens=8, num_logprobs=5, images=images)
    """

    def __init__(
        self,
        model: str | os.PathLike,
        dtype: Any = "auto",
        *,
        auto_cls: Any = None,
        trust_remote_code: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        audit: str = "repair",
        patches: Iterable[Callable[[HfRunner], HfRunner]] = (),
        poison: bool = False,
        workarounds: str | Sequence[str] = (),
        strict_stale: bool = False,
        auto_workarounds: bool = True,
        device_map: Any = None,
        max_memory: dict | None = None,
        offload_folder: str | os.PathLike | None = None,
    ):
        if audit not in POLICIES:
            raise InvalidOptionError(f"audit={audit!r} is not a policy", f"use one of: {', '.join(POLICIES)}")
        self.model_name = str(model)
        self.policy = audit
        self.trust_remote_code = trust_remote_code
        kwargs = dict(model_kwargs or {})
        for key, value in (("device_map", device_map), ("max_memory", max_memory), ("offload_folder", offload_folder)):
            if value is not None:
                kwargs[key] = value
        kwargs["dtype"] = _hf.parse_dtype(dtype)
        kwargs["trust_remote_code"] = trust_remote_code
        self.report: AuditReport | None = None
        """The audit of the model this runner holds (after workarounds and any repair), as ``model.loadguard_report``."""
        self.report_as_loaded: AuditReport | None = None
        """What ``from_pretrained`` left, before workarounds and repair (``model.loadguard_report_as_loaded``)."""
        self.repair: RepairResult | None = None

        chosen = registry.resolve(workarounds)
        load_stage = [w for w in chosen if w.stage != "runner"] + (
            [registry.AUTO] if registry.wants_auto(workarounds) else []
        )
        self.workarounds: list = []
        if audit == "off":
            self.model, early = load_unaudited(
                auto_cls, model, poison=poison, workarounds=load_stage, strict_stale=strict_stale, **kwargs
            )
            self.workarounds = early + _audit.after_load(
                self.model, chosen, strict=strict_stale
            )  # runs the after_load ones only
        else:
            self.model = guarded_load(
                auto_cls,
                model,
                on_problem=audit,
                poison=poison,
                workarounds=load_stage,
                strict_stale=strict_stale,
                **kwargs,
            )
            self.report = self.model.loadguard_report
            self.report_as_loaded = self.model.loadguard_report_as_loaded
            self.repair = self.model.loadguard_repair
            self.workarounds = list(self.report.workarounds)
        self.model.eval()
        with registry.construction(self.model):  # the processor's code may need what the model's load needed
            self.processor, self.tokenizer = load_processing(model, trust_remote_code)
        self._apply_runner_workarounds(chosen, strict_stale, auto_workarounds)
        for patch in patches:  # engine-suite style: a patch adapts the runner in place and returns it
            returned = patch(self)
            if returned is not self:
                raise TypeError(
                    f"patch {getattr(patch, '__name__', patch)!r} must return the runner it was given, got {type(returned).__name__}"
                )

    def _apply_runner_workarounds(self, chosen, strict: bool, automatic: bool) -> None:

        outcomes = registry.for_runner(
            self, chosen, strict=strict, automatic=registry.all_workarounds() if automatic else ()
        )
        self.workarounds += outcomes
        if self.report is not None:
            self.report = dataclasses.replace(self.report, workarounds=tuple(self.workarounds))

    @classmethod
    def from_model(
        cls,
        model,
        processor=None,
        tokenizer=None,
        name: str | None = None,
        *,
        workarounds: Sequence[str] = (),
        auto_workarounds: bool = True,
    ) -> HfRunner:
        """Wrap an already loaded model (no load, no audit): the generation methods, with the runner-stage
        workarounds named and (``auto_workarounds``) those that apply to the model."""

        runner = cls.__new__(cls)
        runner.model_name = name or str(getattr(getattr(model, "config", None), "_name_or_path", type(model).__name__))
        runner.policy = "off"
        runner.trust_remote_code = False
        runner.report = None
        runner.repair = None
        runner.model = model.eval()
        runner.tokenizer = tokenizer if tokenizer is not None else getattr(processor, "tokenizer", processor)
        runner.processor = processor if processor is not None else tokenizer
        runner.workarounds = []
        runner._apply_runner_workarounds(registry.resolve(workarounds), False, auto_workarounds)
        return runner

    # ------------------------------------------------------------------------------------------------
    def __enter__(self) -> HfRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Free the model (the runner cannot generate afterwards)."""
        self.model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def audit(self) -> AuditReport:
        """Audit the model as it is now (after patches, repairs and generation)."""
        return run_audit(self.model)

    # ------------------------------------------------------------------------------------------------
    def _inputs(self, prompt: str, images: Any) -> dict[str, Any]:
        if images is not None and not isinstance(images, (list, tuple)):
            images = [images]
        if images:
            if getattr(self.processor, "image_processor", None) is None:
                raise InvalidOptionError(
                    f"{self.model_name} has no image processor", "pass images only to vision-language models"
                )
            batch = self.processor(text=prompt, images=list(images), return_tensors="pt")
        elif self.processor is None and self.tokenizer is None:  # no tokenizer: ids built from the config, said
            ids = _hf.prompt_ids(self.model.config, prompt)[None]
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        else:
            batch = (self.processor if self.processor is not None else self.tokenizer)(
                text=prompt, return_tensors="pt"
            )
        # the first device that holds weights (offloaded ones stay on meta; accelerate's hooks move inputs)
        device = next((p.device for p in self.model.parameters() if p.device.type != "meta"), torch.device("cpu"))
        return {k: to_device(v, device) for k, v in dict(batch).items()}

    @staticmethod
    def _per_prompt(prompts: Sequence[str], images: Sequence[Any] | None) -> list[Any]:
        if images is None:
            return [None] * len(prompts)
        if len(images) != len(prompts):
            raise InvalidOptionError(
                f"{len(prompts)} prompts but {len(images)} image entries",
                "pass one image (or list, or None) per prompt",
            )
        return list(images)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True) if self.tokenizer is not None else ""

    def _generate_one(self, inputs: dict[str, Any], kwargs: dict[str, Any]):
        """``model.generate`` asked for a dict with the step scores: (output, generated ids). Works whether the
        model's ``generate`` returns prompt + new tokens or, like models that generate from ``inputs_embeds``,
        the new tokens only: the generated ids are the last ones, one per step."""
        asked = {"return_dict_in_generate": True, "output_scores": True, **kwargs}
        output = self._run_model(lambda: self.model.generate(**inputs, **asked))
        if not hasattr(output, "sequences"):  # a generate that returns a plain tensor
            return None, new_tokens(output, inputs.get("input_ids"), kwargs.get("max_new_tokens"))
        steps = len(output.scores or ()) or len(getattr(output, "logits", None) or ())
        sequences = output.sequences
        ids = sequences[0, sequences.shape[1] - steps :].tolist() if steps else []
        return output, ids

    def _run_model(self, call):
        """``call()``, the model's own ``generate`` or forward (see :func:`loadguard.runner._attention.run_model`).
        When the model's code raises, the exception goes on with a note: the module and line that raised, and what the
        audit of the model as it is now finds wrong there (a load that left an index table at INT_MAX raises an
        ``IndexError`` far from its cause)."""
        try:
            return run_model(self.model, call, self.model_name)
        except LoadguardError:
            raise
        except Exception as error:
            note = crash_note(self.model, error)
            if note:
                error.add_note(note)
            raise

    def _check_greedy(self, ids: list[int], output, logprobs: list[dict[int, float]] | None, do_sample: bool) -> None:
        """Under greedy decoding every generated token is the argmax of its step's scores (and, within a
        near-tie, the top of the reported logprobs): anything else means the ids were cut wrong."""
        if output is None or do_sample or getattr(output, "scores", None) is None:
            return
        if len(output.scores) != len(ids):
            raise RunnerConsistencyError(
                f"{self.model_name}: {len(ids)} generated ids but {len(output.scores)} generation steps",
                _CONSISTENCY_HINT,
            )
        for step, (token, scores) in enumerate(zip(ids, output.scores)):
            row = scores[0].float()
            if not bool(torch.isfinite(row).any()):
                continue  # all-NaN logits: the comparators report that, with the model's own words
            best = int(torch.argmax(row))
            if best != token:
                raise RunnerConsistencyError(
                    f"{self.model_name}: step {step} generated token {token} but the argmax of that step's scores is {best}",
                    _CONSISTENCY_HINT,
                )
            if logprobs is not None and logprobs[step]:
                top = max(logprobs[step].values())
                mine = logprobs[step].get(token)
                if mine is None or (math.isfinite(top) and top - mine > _near_tie(self.model)):
                    raise RunnerConsistencyError(
                        f"{self.model_name}: step {step} generated token {token} but the logprobs rank another token first "
                        f"({top:.4f} vs {mine if mine is not None else 'not in the top-k'})",
                        _CONSISTENCY_HINT,
                    )

    def generate(self, prompts: Sequence[str], images: Sequence[Any] | None = None, **kwargs: Any) -> list[TokensText]:
        """``model.generate`` per prompt; returns exactly the generated tokens as ``(ids, text)``."""
        results = []
        with torch.no_grad():
            for prompt, prompt_images in zip(prompts, self._per_prompt(prompts, images)):
                output, ids = self._generate_one(self._inputs(prompt, prompt_images), kwargs)
                self._check_greedy(ids, output, None, bool(kwargs.get("do_sample", False)))
                results.append((ids, self._decode(ids)))
        return results

    def generate_greedy(
        self, prompts: Sequence[str], max_tokens: int, images: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[TokensText]:
        return self.generate(prompts, images, do_sample=False, max_new_tokens=max_tokens, **kwargs)

    def generate_greedy_logprobs_limit(
        self,
        prompts: Sequence[str],
        max_tokens: int,
        num_logprobs: int,
        images: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[TokensTextLogprobs]:
        """Greedy generation with the top ``num_logprobs`` logprobs per generated token.

        Logprobs are the float32 log-softmax of the last hidden state times the output embedding (as engine
        suites compute them), or of the model's raw logits when it returns no hidden states. The generated ids
        are checked against each step's argmax (:class:`RunnerConsistencyError` if they disagree).
        """
        results = []
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        with torch.no_grad():  # a model's generate may hand back inference-mode tensors
            for prompt, prompt_images in zip(prompts, self._per_prompt(prompts, images)):
                inputs = self._inputs(prompt, prompt_images)
                options = {
                    "do_sample": False,
                    "max_new_tokens": max_tokens,
                    "output_hidden_states": True,
                    "output_logits": True,
                    **kwargs,
                }
                output, ids = self._generate_one(inputs, options)
                if output is None:
                    raise InvalidOptionError(
                        f"{self.model_name}'s generate returns no scores", "use generate_greedy for this model"
                    )
                steps = []
                for step, logits in enumerate(output.logits):
                    hidden = last_hidden(output, step)
                    if hidden is not None and head is not None and isinstance(head, torch.nn.Linear):
                        scores = hidden.float() @ head.weight.float().t()
                        if head.bias is not None:
                            scores = scores + head.bias.float()
                    else:
                        scores = logits[0].float()
                    logprobs = torch.log_softmax(scores, dim=-1)
                    top = torch.topk(logprobs, num_logprobs)
                    steps.append({int(t): float(v) for t, v in zip(top.indices.tolist(), top.values.tolist())})
                self._check_greedy(ids, output, steps, False)
                results.append((ids, self._decode(ids), steps))
        return results

    def encode(self, prompts: Sequence[str]) -> list[list[float]]:
        """Sentence embeddings: attention-mask mean pooling of the last hidden state, L2-normalized."""
        vectors = []
        for prompt in prompts:
            inputs = self._inputs(prompt, None)
            with torch.no_grad():
                output = self._run_model(lambda: self.model(**inputs))
            hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
            mask = (
                inputs.get("attention_mask", torch.ones(hidden.shape[:2], device=hidden.device))
                .unsqueeze(-1)
                .to(hidden.dtype)
            )
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            vectors.append(torch.nn.functional.normalize(pooled.float(), dim=-1)[0].tolist())
        return vectors


_CONSISTENCY_HINT = (
    "this is a loadguard runner bug or a model whose generate post-processes its tokens: report it with the model"
)


def _near_tie(model) -> float:
    """How far the float32 recomputed logprobs may rank another token above the generated one: none in
    float32, a bfloat16/float16 rounding's worth otherwise."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return 1e-4 if dtype in (torch.float32, torch.float64) else 0.1


def load_processing(path, trust_remote_code: bool) -> tuple[Any, Any]:
    """(processor, tokenizer) of a model folder, each None when it has none. A text-only model's processor
    is its tokenizer; a multimodal processor's tokenizer is taken from it rather than loaded twice."""
    from transformers import AutoProcessor, AutoTokenizer

    processor = _optional(lambda: AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code))
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None:
        tokenizer = (
            processor
            if hasattr(processor, "decode")
            else _optional(lambda: AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code))
        )
    return (processor if processor is not None else tokenizer), tokenizer


def _optional(factory):
    try:
        return factory()
    except Exception:  # a model without a tokenizer or processor: the runner works without it
        return None
