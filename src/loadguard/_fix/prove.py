"""The 4.x side of ``loadguard fix``'s proof: ``python -m loadguard._fix.prove ORIGINAL PATCHED [WORKAROUND,...]`` inside
an environment of another transformers (the matrix's, :mod:`loadguard._infra.envs`).

Loads both folders with a plain ``from_pretrained`` (``trust_remote_code=True``, the same seed before each), then
compares every parameter, buffer and plain tensor attribute, bit for bit, and the first forward pass on a fixed batch
of token ids where the model takes ``input_ids``. Prints one JSON object. The comparison uses torch and transformers
only, nothing of loadguard's audit; the *original* alone is loaded inside the named workarounds its load needed (code
written against an older torch fails to import even on transformers 4): the patched copy gets none.
"""

from __future__ import annotations

import contextlib
import json
import sys


def _tensors(model) -> dict:
    import torch

    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(model.named_buffers(remove_duplicate=False))
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                named.setdefault(f"{prefix}.{key}" if prefix else key, value)
    return named


def _load(folder: str, workarounds: list[str] | None = None):

    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)  # config classes import nothing of the model
    auto_map = getattr(config, "auto_map", None) or {}
    cls = AutoModelForCausalLM if "AutoModelForCausalLM" in auto_map or not auto_map else AutoModel
    if workarounds:
        from loadguard.workarounds import using

        context = using(workarounds, folder)
    else:
        context = contextlib.nullcontext()
    torch.manual_seed(0)
    with context:
        return cls.from_pretrained(folder, trust_remote_code=True).eval()


def _forward(model):
    import torch

    vocab = int(
        getattr(model.config, "vocab_size", 0)
        or getattr(getattr(model.config, "text_config", None), "vocab_size", 0)
        or 32
    )
    ids = (torch.arange(12).reshape(2, 6) * 7 + 3) % vocab
    import inspect

    # no cache: one pass over the ids is all the proof needs (and v4-era code may not speak 4.57's cache classes)
    extra = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    with torch.no_grad():
        output = model(input_ids=ids, **extra)
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = output[0] if isinstance(output, (tuple, list)) else getattr(output, "last_hidden_state", None)
    return logits


def _repaired_here_too(model, patched: dict, original: dict, differ: list[str]) -> list[str]:
    """Of the tensors that differ, those the original loads wrong on this transformers too (a parameter its checkpoint
    lacks, left as leftover memory): the patched copy holds what the model's code computes (a fresh eager construction
    of its class), the original does not."""
    import torch

    shared = [n for n in differ if n in patched and n in original]
    if not shared:
        return []
    torch.manual_seed(0)
    try:
        eager = type(model)(model.config)
    except Exception:  # a class that cannot be constructed eagerly: nothing is excused
        return []
    truth = _tensors(eager)
    out = []
    for name in shared:
        value = truth.get(name)
        if value is None or value.is_meta or patched[name].is_meta or value.shape != patched[name].shape:
            continue
        if torch.equal(patched[name].detach().to(value.dtype), value.detach()) and not torch.equal(
            original[name].detach().to(value.dtype), value.detach()
        ):
            out.append(name)
    return out


def compare(original: str, patched: str, workarounds: list[str] | None = None) -> dict:
    import torch
    import transformers

    before, after = _load(original, workarounds), _load(patched)
    mine, theirs = _tensors(before), _tensors(after)
    differ = sorted(set(mine) ^ set(theirs))
    for name in sorted(set(mine) & set(theirs)):
        a, b = mine[name], theirs[name]
        if a.is_meta or b.is_meta:
            if a.is_meta != b.is_meta or a.shape != b.shape:
                differ.append(name)
            continue
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.detach(), b.detach()):
            differ.append(name)
    repaired = _repaired_here_too(after, theirs, mine, differ)
    differ = [name for name in differ if name not in repaired]
    try:
        first, second = _forward(before), _forward(after)
        if first is None or second is None:
            forward = "not compared: the output has no logits or hidden states"
        else:
            forward = (
                "equal"
                if torch.equal(first, second) or (torch.isnan(first).all() and torch.isnan(second).all())
                else (f"differs (max |diff| {float((first - second).abs().nan_to_num(float('inf')).max()):.3g})")
            )
    except Exception as error:  # a model whose forward takes more than token ids (pixel values, a data dict)
        forward = f"not compared: its forward does not take input_ids alone ({type(error).__name__})"
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tensors": len(mine),
        "differ": differ[:50],
        "differ_count": len(differ),
        "forward": forward,
        "repaired": repaired,
    }


def main() -> None:
    original, patched = sys.argv[1], sys.argv[2]
    workarounds = [w for w in (sys.argv[3] if len(sys.argv) > 3 else "").split(",") if w]
    try:
        result = compare(original, patched, workarounds)
    except Exception as error:
        result = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:500]}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
