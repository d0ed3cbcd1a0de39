"""Inputs a model's ``forward`` takes, built from its config alone (no tokenizer, no processor), and what one forward
pass and a short greedy generation give on them. The same on every transformers (4.x and 5.x: torch and ``inspect``
only, nothing of loadguard's audit), so two loads of one model on two releases can be compared output for output.

Example::

    from loadguard._hf import model_outputs

    seen = model_outputs(model)         # {"inputs": [...], "values": tensor, "tokens": [...], "error": None, ...}
"""

from __future__ import annotations

import inspect
import traceback
import warnings
from typing import Any

from .modalities import BUILDERS, PRIMARY, image_size, text_config

PROMPT_LENGTH = 8
NEW_TOKENS = 8


def _special_ids(*configs: Any) -> set[int]:
    """Every id a config reserves (pad, bos, eos, image and video placeholders, ...): kept out of the built prompt, where
    an image token without pixel values, or an eos, would change what is compared."""
    special: set[int] = set()
    for config in configs:
        names = set(vars(config) if hasattr(config, "__dict__") else ()) | set(dir(type(config)))
        for key in names:
            if not (key.endswith("_token_id") or key.endswith("_token_index") or key.endswith("_token_ids")):
                continue
            try:
                value = getattr(config, key)
            except Exception:  # a property of a remote config that fails: nothing reserved through it
                continue
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, int) and not isinstance(item, bool):
                    special.add(item)
    return special


def token_ids(config: Any, batch: int = 2, length: int = PROMPT_LENGTH):
    """A fixed batch of token ids within the vocabulary, avoiding every id the config reserves."""
    import torch

    text = text_config(config)
    vocab = int(getattr(text, "vocab_size", 0) or getattr(config, "vocab_size", 0) or 32)
    special = _special_ids(config, text)
    allowed = [i for i in range(min(vocab, 4096)) if i not in special] or [0]
    picks = [allowed[(i * 7 + 3) % len(allowed)] for i in range(batch * length)]
    return torch.tensor(picks, dtype=torch.long).reshape(batch, length)


def prompt_ids(config: Any, prompt: str, length: int = 16):
    """Token ids for ``prompt`` without a tokenizer: its UTF-8 bytes mapped into the config's vocabulary (every id it
    reserves avoided), at most ``length`` of them: the same prompt always gives the same ids, two prompts differ."""
    import torch

    text = text_config(config)
    vocab = int(getattr(text, "vocab_size", 0) or getattr(config, "vocab_size", 0) or 32)
    special = _special_ids(config, text)
    allowed = [i for i in range(min(vocab, 4096)) if i not in special] or [0]
    data = prompt.encode("utf-8")[:length] or b" "
    return torch.tensor([allowed[(byte * 7 + 3 + i) % len(allowed)] for i, byte in enumerate(data)], dtype=torch.long)


def _first_device_and_dtype(model: Any):
    import torch

    device, dtype = torch.device("cpu"), torch.float32
    for parameter in model.parameters():
        if parameter.device.type != "meta":
            device = parameter.device
            if parameter.is_floating_point():
                dtype = parameter.dtype
                break
    return device, dtype


def model_inputs(
    model: Any, batch: int = 2, length: int = PROMPT_LENGTH, ids: Any = None
) -> tuple[dict[str, Any], list[str]]:
    """``(keyword arguments for model.forward, the required arguments it takes that could not be built)``: token ids of
    the config's vocabulary (or ``ids``: a prompt the model's own tokenizer encoded, with the special tokens it adds),
    an all-ones attention mask, and, by the forward's own names, the other modalities from the config's sizes: images
    (``pixel_values``: its ``image_size`` and channels; 224 square for a vision model whose config has none), a
    waveform (``input_values``), log-mel features (``input_features``), a time series (``past_values`` with its time features and observed mask: the
    config's context length, lags and channels), embeddings (``inputs_embeds``). Each is built where the forward
    requires it, and a model that takes no token ids gets its primary input even where it defaults to None. Float
    inputs are seeded (the same on every release) and in the model's dtype. ``use_cache=False`` (one pass is compared;
    v4-era code may not speak a newer cache class)."""
    import torch

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        parameters = {}
    open_ended = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    takes_ids = "input_ids" in parameters or open_ended
    device, dtype = _first_device_and_dtype(model)
    ids = (token_ids(model.config, batch, length) if ids is None else torch.as_tensor(ids, dtype=torch.long)).to(
        device
    )
    built: dict[str, Any] = {}

    def made(name: str) -> Any:  # the modality's input, on the model's device, floats in its dtype (None: not built)
        value = BUILDERS[name](model.config, int(ids.shape[0]), int(ids.shape[-1]))
        return None if value is None else value.to(device, dtype if value.is_floating_point() else value.dtype)

    if takes_ids:
        built["input_ids"] = ids
    if "attention_mask" in parameters and takes_ids:
        built["attention_mask"] = torch.ones_like(ids)
    if "use_cache" in parameters:
        built["use_cache"] = False
    missing = []
    for name, parameter in parameters.items():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in (
            parameter.POSITIONAL_OR_KEYWORD,
            parameter.KEYWORD_ONLY,
        )
        primary = not takes_ids and name in PRIMARY and not any(p in built for p in PRIMARY)
        if not (required or primary) or name in built:
            continue
        # a vision-language model's images need the size its processor makes: its text part runs
        guessed_images = takes_ids and name in ("pixel_values", "images") and not image_size(model.config)
        value = made(name) if name in BUILDERS and not guessed_images else None
        if value is not None:
            built[name] = value
        elif required:
            missing.append(name)
    for name in ("past_time_features", "past_observed_mask"):  # what a time series comes with where it is taken
        if "past_values" in built and name in parameters and name not in built:
            built[name] = made(name)
    return built, missing


def _model_line(error: BaseException) -> str:
    """``file:line`` of the innermost frame of the model's own code (not torch's, transformers' or loadguard's)."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        if path.startswith("<"):  # <frozen ...>, <string>: nobody's file
            continue
        if not any(f"/{package}/" in path for package in ("torch", "transformers", "loadguard", "accelerate")):
            return f"{path.rsplit('/', 1)[-1]}:{frame.lineno}"
    return ""


def _raised_in(error: BaseException) -> str:
    """Whose code raised: ``transformers`` (its own, reading something of the model's), or ``model``."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<")]
    inner = frames[-1].filename.replace("\\", "/") if frames else ""
    return "transformers" if "/transformers/" in inner else "model"


def _crash(stage: str, error: BaseException, fixes: Any = None) -> dict[str, Any]:
    message = str(error).splitlines()[0] if str(error) else ""
    missing = ""
    if isinstance(error, AttributeError) and not message.startswith("'NoneType'"):  # a None is no missing API
        missing = getattr(error, "name", None) or (message.rsplit("'", 2)[-2] if message.count("'") >= 2 else "")
    return {
        "stage": stage,
        "type": type(error).__name__,
        "message": message[:400],
        "line": _model_line(error),
        "missing": missing,
        "raised_in": _raised_in(error),
        "fixes": list(fixes(error)) if fixes is not None else [],
    }


def _logits(output: Any):
    values = getattr(output, "logits", None)
    kind = "logits"
    if values is None:
        values = getattr(output, "last_hidden_state", None)
        kind = "hidden states"
    if values is None and isinstance(output, (tuple, list)) and output:
        values, kind = output[0], "the first output"
    return values, kind


def _generates(model: Any) -> bool:
    can = getattr(model, "can_generate", None)
    try:
        return bool(callable(can) and can())
    except Exception:  # a remote class whose can_generate itself fails: treated as not generative
        return False


def tokenized(folder: str, batch: int = 2) -> list[list[int]] | None:
    """A fixed prompt as the model's own tokenizer encodes it (the special tokens it adds included: ChatGLM's gMASK),
    ``batch`` rows of it; None when the folder has no tokenizer that loads."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        row = [int(i) for i in tokenizer(PROMPT)["input_ids"]]
    except Exception:  # no tokenizer, or one that does not load here: the ids built from the config are used
        return None
    return [row] * batch if row else None


PROMPT = "The quick brown fox jumps over the lazy dog because"
"""What a model's own tokenizer encodes for proof (c): plain words every vocabulary has."""


def model_outputs(
    model: Any, new_tokens: int = NEW_TOKENS, generate: bool = True, fixes: Any = None, ids: Any = None
) -> dict[str, Any]:
    """One forward pass on :func:`model_inputs` and (``generate``, a model that generates) ``new_tokens`` greedy tokens
    from the first row. Never raises for the model's own failures: ``error`` holds the stage, type, message, the
    model's line, (an ``AttributeError``) the name it looked for and (``fixes``: ``error -> names``, as
    :func:`loadguard.workarounds.fixes_for`) the workarounds that declare the failure.

    A model whose forward requires inputs a config cannot describe (a VLM taking a ``data`` dict) is run through its
    first sub-model that takes built inputs (its language model): ``part`` names it, ``whole_missing`` what the whole
    model's forward required; ``part`` is ``""`` when the whole model ran.

    Returns ``{"inputs": names built, "dtype": the model's, "missing": required inputs not built, "kind": "logits" |
    "hidden states" | ..., "values": float32 tensor or None, "tokens": generated ids or None, "generate": why not
    generated ("" when it was), "error": None or the crash, "part", "whole_missing"}``."""
    kwargs, missing = model_inputs(model, ids=ids)
    if missing:
        for name, module in model.named_modules():
            if name and hasattr(module, "config") and hasattr(module, "can_generate") and not model_inputs(module)[1]:
                return {
                    **model_outputs(module, new_tokens, generate, fixes, ids),
                    "part": name,
                    "whole_missing": missing,
                }
    return {**_run(model, kwargs, missing, new_tokens, generate, fixes), "part": "", "whole_missing": []}


def _run(model: Any, kwargs: dict, missing: list[str], new_tokens: int, generate: bool, fixes: Any) -> dict[str, Any]:
    import torch

    result: dict[str, Any] = {
        "inputs": sorted(name for name, value in kwargs.items() if isinstance(value, torch.Tensor)),
        "dtype": str(_first_device_and_dtype(model)[1]).rpartition(".")[2],
        "missing": missing,
        "kind": None,
        "values": None,
        "tokens": None,
        "generate": "",
        "error": None,
        "unsteady": None,
    }
    if missing:
        result["generate"] = "not run: the forward's required inputs could not be built"
        return result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                output = model(**kwargs)
        except Exception as error:  # the model's own code failed: that is the finding
            result["error"] = _crash("forward", error, fixes)
            result["generate"] = "not run: the forward pass failed"
            return result
        values, kind = _logits(output)
        if isinstance(values, torch.Tensor):
            result["values"], result["kind"] = values.detach().float().cpu(), kind
            result["unsteady"] = _unsteady(model, kwargs, result["values"])
        else:
            result["kind"] = "no tensor output"
        if not generate:
            result["generate"] = "not asked"
        elif not _generates(model):
            result["generate"] = "not generative (no generate)"
        else:
            result["tokens"], result["error"] = _greedy(model, kwargs, new_tokens, fixes)
            if result["error"]:
                result["generate"] = "failed"
    return result


def _unsteady(model: Any, kwargs: dict[str, Any], first: Any) -> float | None:
    """The same forward pass once more: None when it gives the same values (NaN where NaN), else the largest difference
    (a forward that adds noise, dropout left on: its outputs cannot be held to another run's)."""
    import torch

    try:
        with torch.no_grad():
            again, _ = _logits(model(**kwargs))
    except Exception:  # it ran once: a second failure is not this question's
        return None
    if not isinstance(again, torch.Tensor) or again.shape != first.shape:
        return float("inf")
    again = again.detach().float().cpu()
    same = torch.equal(first.nan_to_num(0.0, 1e30, -1e30), again.nan_to_num(0.0, 1e30, -1e30)) and torch.equal(
        first.isnan(), again.isnan()
    )
    return None if same else float((first - again).abs().nan_to_num(float("inf")).max())


def _greedy(model: Any, kwargs: dict[str, Any], new_tokens: int, fixes: Any) -> tuple[list[int] | None, dict | None]:
    import torch

    ids = kwargs.get("input_ids")
    if ids is None:
        return None, {
            "stage": "generate",
            "type": "",
            "message": "no input_ids",
            "line": "",
            "missing": "",
            "fixes": [],
        }
    text = text_config(model.config)
    vocab = int(getattr(text, "vocab_size", 0) or getattr(model.config, "vocab_size", 0) or 0)
    generation = getattr(model, "generation_config", None)
    eos = getattr(generation, "eos_token_id", None)
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    # an end-of-sequence id the vocabulary does not hold (a config shrunk for a test) would make min_new_tokens index
    # past the logits: then no minimum, and the tokens compared are those both sides generate before they stop
    bounded = {"min_new_tokens": new_tokens} if not vocab or all(0 <= e < vocab for e in eos) else {}
    pad = next(
        (
            v
            for v in (getattr(text, "pad_token_id", None), getattr(text, "eos_token_id", None))
            if isinstance(v, int) and (not vocab or 0 <= v < vocab)
        ),
        0,
    )
    extra = {k: v[:1] for k, v in kwargs.items() if k not in ("input_ids", "use_cache") and torch.is_tensor(v)}
    try:
        with torch.no_grad():
            sequences = model.generate(
                input_ids=ids[:1],
                **extra,
                max_new_tokens=new_tokens,
                **bounded,
                do_sample=False,
                num_beams=1,
                pad_token_id=pad,
            )
    except Exception as error:  # the model's own generation code failed
        return None, _crash("generate", error, fixes)
    sequences = getattr(sequences, "sequences", sequences)
    return [int(t) for t in sequences[0, ids.shape[1] :].tolist()], None


def describe_crash(error: dict[str, Any]) -> str:
    """One line for a crash :func:`model_outputs` caught: where, what, and the API it looked for."""
    where = f" at {error['line']}" if error.get("line") else ""
    looked = ""
    if error.get("missing") and error.get("raised_in") == "transformers":
        looked = f" (transformers' own code asks the model's object for {error['missing']}, which its code never had)"
    elif error.get("missing"):
        looked = f" (it calls {error['missing']}, which this transformers does not have)"
    named = f"; workaround {', '.join(error['fixes'])} gives it back" if error.get("fixes") else ""
    return f"{error['stage']} raised {error['type']}{where}: {error['message']}{looked}{named}"


__all__ = [
    "NEW_TOKENS",
    "PROMPT_LENGTH",
    "describe_crash",
    "model_inputs",
    "PROMPT",
    "model_outputs",
    "prompt_ids",
    "tokenized",
    "token_ids",
]
