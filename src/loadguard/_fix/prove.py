"""The 4.x side of ``loadguard fix``'s proof: ``python -m loadguard._fix.prove ORIGINAL PATCHED [WORKAROUND,...]
[CLASS] [weightless] [VALUES_FILE]`` inside an environment of another transformers (the matrix's, :mod:`loadguard._infra.envs`).

Loads both folders with a plain ``from_pretrained`` (``trust_remote_code=True``, the same seed before each), then
compares every parameter, buffer and plain tensor attribute, bit for bit, and the first forward pass on inputs built
from the config (:mod:`loadguard._hf.inputs`). The original's outputs there (its logits, saved to ``VALUES_FILE``, and
its greedy tokens) are proof (c)'s reference: the patched copy on transformers 5 must answer the same. Writes one JSON object to the descriptor ``LOADGUARD_RESULT_FD``
names, with the nonce read on stdin (never to stdout, where the model's code prints; run by hand: printed). The comparison uses torch and transformers
only, nothing of loadguard's audit; the *original* alone is loaded inside the named workarounds its load needed (code
written against an older torch fails to import even on transformers 4): the patched copy gets none.

``CLASS``: the model class the transformers 5 side loaded; the auto class whose ``auto_map`` entry names it (or
transformers' own class of that name) loads both here, so both sides build the same model. ``weightless``: the folders
hold no checkpoint: both are constructed from their config (``from_config``, parameters on meta, buffers real, as
``accelerate.init_empty_weights(include_buffers=False)`` builds them), which runs ``__init__`` and, through
``post_init``, every ``_init_weights`` branch; buffers and tensor attributes are compared bit for bit, parameters by
name, shape and dtype (their values need weights), and no forward pass runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import tempfile
import uuid
from pathlib import Path

from .._hf import built_from_config, class_for, synthetic
from .._hf import model_outputs as outputs


def _tensors(model) -> dict:
    import torch

    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(model.named_buffers(remove_duplicate=False))
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                named.setdefault(f"{prefix}.{key}" if prefix else key, value)
    return named


def same_bits(a, b) -> bool:
    """Bit for bit: NaN where the other holds the same NaN is equal (a checkpoint may hold NaN; ``torch.equal`` never
    calls NaN equal)."""
    import torch

    first, second = a.detach().contiguous().reshape(-1), b.detach().contiguous().reshape(-1)
    if first.dtype == torch.bool or first.numel() == 0:
        return torch.equal(first, second)
    return torch.equal(first.view(torch.uint8), second.view(torch.uint8))


def _load(folder: str, workarounds: list[str] | None = None, class_name: str | None = None, weightless: bool = False):

    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)  # config classes import nothing of the model
    cls = class_for(config, class_name)
    if workarounds:
        from loadguard.workarounds import using

        context = using(workarounds, folder)
    else:
        context = contextlib.nullcontext()
    torch.manual_seed(0)
    with context:
        if not weightless:
            return cls.from_pretrained(folder, trust_remote_code=True).eval()
        from accelerate import init_empty_weights

        with init_empty_weights(include_buffers=False):
            return built_from_config(cls, config).eval()


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


def compare(
    original: str,
    patched: str,
    workarounds: list[str] | None = None,
    class_name: str | None = None,
    weightless: bool = False,
    values_file: str = "",
    ids: list | None = None,
) -> dict:
    import torch
    import transformers

    before = _load(original, workarounds, class_name, weightless)
    after = _load(patched, None, class_name, weightless)
    mine, theirs = _tensors(before), _tensors(after)
    # without weights a parameter's value is whatever construction left (meta, or leftover memory where the code skips
    # initialization): parameters are compared by shape and dtype only
    unvalued = {name for name, _ in before.named_parameters(remove_duplicate=False)} if weightless else set()
    differ = sorted(set(mine) ^ set(theirs))
    for name in sorted(set(mine) & set(theirs)):
        a, b = mine[name], theirs[name]
        if a.is_meta or b.is_meta or name in unvalued:
            if a.is_meta != b.is_meta and name not in unvalued or a.shape != b.shape or a.dtype != b.dtype:
                differ.append(name)
            continue
        if a.shape != b.shape or a.dtype != b.dtype or not same_bits(a, b):
            differ.append(name)
    repaired = [] if weightless else _repaired_here_too(after, theirs, mine, differ)
    differ = [name for name in differ if name not in repaired]
    if weightless:
        return {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "class": type(before).__name__,
            "weightless": True,
            "tensors": len(mine),
            "valued": sum(1 for name, value in mine.items() if not value.is_meta and name not in unvalued),
            "differ": differ[:50],
            "differ_count": len(differ),
            "forward": "not compared: no weights (parameters compared by name, shape and dtype)",
            "repaired": [],
            **(
                {"outputs": _synthetic_outputs(original, workarounds, class_name, values_file, ids)}
                if values_file
                else {}
            ),
        }
    # the original's forward and greedy tokens are proof (c)'s reference; the patched copy's forward is (b)'s. A tensor
    # the original loads wrong here too is set as its code computes it first (what the patched copy holds, checked above)
    with torch.no_grad():
        for name in repaired:
            mine[name].copy_(theirs[name].to(mine[name].dtype))
    seen, patched = outputs(before, generate=bool(values_file), ids=ids), outputs(after, generate=False, ids=ids)
    seen["set_like_code"] = repaired
    first, second = seen.pop("values"), patched["values"]
    if seen["missing"]:
        forward = f"not compared: its forward requires {', '.join(seen['missing'])}"
    elif seen["error"] and seen["error"]["stage"] == "forward":
        forward = f"not compared: the original's forward raised {seen['error']['type']}"
    elif patched["error"]:
        forward = (
            f"differs: the patched copy's forward raised {patched['error']['type']}: {patched['error']['message']}"
        )
    elif first is None or second is None:
        forward = "not compared: the output has no logits or hidden states"
    elif first.shape != second.shape:
        forward = f"differs (shape {tuple(second.shape)}, the original's {tuple(first.shape)})"
    elif torch.equal(first, second) or (torch.isnan(first).all() and torch.isnan(second).all()):
        forward = "equal"
    else:
        forward = f"differs (max |diff| {float((first - second).abs().nan_to_num(float('inf')).max()):.3g})"
    if values_file:
        _save_values(first, values_file, seen)
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "class": type(before).__name__,
        "tensors": len(mine),
        "differ": differ[:50],
        "differ_count": len(differ),
        "forward": forward,
        "repaired": repaired,
        "outputs": seen,
    }


def _save_values(values, values_file: str, seen: dict) -> None:
    """The original's logits to ``values_file`` for the parent, their SHA-256 into its result (read back only when the
    file is the one reported)."""
    import torch

    if isinstance(values, torch.Tensor):
        torch.save(values.contiguous(), values_file)
        seen["values_sha256"] = hashlib.sha256(Path(values_file).read_bytes()).hexdigest()


def _synthetic_outputs(folder: str, workarounds, class_name: str | None, values_file: str, ids=None) -> dict:
    """Proof (c)'s reference without weights: the original built from its config with synthetic weights (the same
    values the other side gives the patched copy), its forward and greedy tokens."""

    context = None
    if workarounds:
        from loadguard.workarounds import using

        context = using(workarounds, folder)
    model, why = synthetic(folder, class_name, context)
    if model is None:
        return {"not_built": why}
    seen = outputs(model, ids=ids)
    _save_values(seen.pop("values"), values_file, seen)
    return {**seen, "synthetic": True, "shrunk": why}


def _every_file_of_the_code(folder: Path) -> None:
    """Every ``*.py`` of the folder in the copy transformers makes of its code, before it makes it: 4.x copies the
    modeling file and what it imports relatively, but not what those import in turn (a helper a function imports, whose
    own sibling then is missing: MOSS's quantization.py and custom_autotune.py), and the load fails with
    FileNotFoundError; a file transformers copies itself is written over as it writes it."""
    import os
    import shutil

    try:
        from transformers.utils import HF_MODULES_CACHE
    except ImportError:
        HF_MODULES_CACHE = os.environ.get("HF_MODULES_CACHE", "")
    if not HF_MODULES_CACHE:
        return
    target = Path(HF_MODULES_CACHE, "transformers_modules", folder.name)
    target.mkdir(parents=True, exist_ok=True)
    for file in folder.glob("*.py"):
        if not (target / file.name).exists():
            shutil.copyfile(file, target / file.name)


def _forget_modules(*names: str) -> None:
    """What transformers copied of both folders into its modules cache (``transformers_modules/lg_*_<tag>``): removed,
    so runs leave nothing behind in the environment."""
    import os
    import shutil

    try:
        from transformers.utils import HF_MODULES_CACHE
    except ImportError:  # an old 4.x without the name: the variable the parent set
        HF_MODULES_CACHE = os.environ.get("HF_MODULES_CACHE", "")
    for name in names if HF_MODULES_CACHE else ():
        shutil.rmtree(Path(HF_MODULES_CACHE, "transformers_modules", name), ignore_errors=True)


def _channel() -> tuple[str, int] | None:
    """Where the result goes, taken before any model code runs: the descriptor the parent passed and the nonce it wrote
    on stdin (stdin then reads nothing; the descriptor is not inherited by what the model's code starts). None: run by
    hand, the result is printed."""
    import os

    number = os.environ.pop("LOADGUARD_RESULT_FD", None)
    if number is None:
        return None
    nonce = sys.stdin.readline().strip()
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.close(empty)
    os.set_inheritable(int(number), False)
    return nonce, int(number)


def main() -> None:
    channel = _channel()
    original, patched = sys.argv[1], sys.argv[2]
    workarounds = [w for w in (sys.argv[3] if len(sys.argv) > 3 else "").split(",") if w]
    class_name = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
    weightless = len(sys.argv) > 5 and sys.argv[5] == "weightless"
    values_file = sys.argv[6] if len(sys.argv) > 6 else ""
    ids_file = sys.argv[7] if len(sys.argv) > 7 else ""
    ids = json.loads(Path(ids_file).read_text() or "null") if ids_file else None
    try:
        with tempfile.TemporaryDirectory(prefix="loadguard-prove-") as names:
            # transformers before 4.4x names a folder's remote-code module after the folder itself, unsanitized: the
            # staging folder (.out.loadguard-fix-...) is no module name there. Each side is loaded through a link with a
            # plain name of its own (unique: fixes may run side by side on one module cache)
            tag = uuid.uuid4().hex[:8]
            original_link, patched_link = Path(names, f"lg_original_{tag}"), Path(names, f"lg_patched_{tag}")
            original_link.symlink_to(Path(original).resolve(), target_is_directory=True)
            patched_link.symlink_to(Path(patched).resolve(), target_is_directory=True)
            for link in (original_link, patched_link):
                _every_file_of_the_code(link)
            try:
                result = compare(
                    str(original_link), str(patched_link), workarounds, class_name, weightless, values_file, ids
                )
            finally:
                _forget_modules(original_link.name, patched_link.name)
    except Exception as error:
        result = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:500]}
    if channel is None:
        print(json.dumps(result), flush=True)
        return
    nonce, number = channel
    with open(number, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"nonce": nonce, "result": result}))


if __name__ == "__main__":
    main()
