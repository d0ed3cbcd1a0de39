"""``v4-module-names``: every module-level name transformers 4.57 had and 5.x removed, served back to code written
for 4.x, derived from the API diff (``workarounds/data/api_diff.json``, made by ``make api-diff``), not from the
failures we happened to see.

For a name the running transformers lacks, in the module 4.57 had it in, the workaround gives (in this order):

1. its own stand-in with 4.57's meaning, where the name's home is gone too (``find_pruneable_heads_and_indices``,
   ``prune_linear_layer``, ``is_*_available`` ...: :data:`OWN`);
2. the same object from where 4.57's lived, where that still exists (``Optional`` re-exported by a model module,
   ``BaseModelOutputWithPast``, ``ACT2FN``, ``logger``'s kind ...), or 4.57's value for a constant;
3. by pattern: ``<X>FlashAttention2`` / ``<X>SdpaAttention`` -> the module's ``<X>Attention`` (which picks its kernel
   from ``config._attn_implementation``), ``*_ATTENTION_CLASSES`` -> every kernel mapped to that class.

What none of these can give back is declined with the reason in :data:`DECLINED` (``tests/workarounds/test_api_diff.py``
requires every entry of the diff served or declined). Names other workarounds own are left to them.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

from .._infra import AfterImport
from ._registry import Usage, workaround
from .remote_code import has_remote_code

OWNED_ELSEWHERE = {
    "is_torch_fx_available",
    "AutoModelForVision2Seq",
    "AutoModelWithLMHead",
}  # v4-torch-fx-available, v4-removed-auto-classes
_ATTENTION_VARIANT = re.compile(
    r"^(?P<prefix>[A-Z]\w*?)(FlashAttention2|SdpaAttention|FlashAttention|SdpaSelfAttention)$"
)

# (names matching the pattern, why no stand-in is given): the diff's entries no workaround serves
DECLINED: tuple[tuple[str, str], ...] = (
    (
        r"^name:transformers\.models\.auto\.modeling_auto:_\w+$",
        "the auto classes' private lazy stand-ins: the public names are v4-removed-auto-classes'",
    ),
    (
        r"^name:transformers\.models\.[\w.]+:[A-Z]\w*$",
        "a layer class of a native model that 5.x restructured or removed: no stand-in can "
        "give 4.x's behaviour; remote code subclassing it must be ported",
    ),
    (
        r"^name:transformers\.models\.[\w.]+:_?[a-z]\w*$",
        "a helper function of a native model that 5.x removed with no public home: "
        "remote code that imports it must carry its own copy",
    ),
    (
        r"^name:transformers\.(modeling_utils|configuration_utils|generation\.utils|integrations\.[\w.]+|utils[\w.]*):_\w+$",
        "transformers' private loading / import machinery: remote code does not import it (a load that does says which name)",
    ),
    (
        r"^name:transformers\.(modeling_utils|configuration_utils|generation\.utils|utils[\w.]*|pytorch_utils):[\w]+$",
        "a helper 5.x removed with its home and no 4.x meaning for model code to rely on (download/URL, TF/Flax, "
        "model-parallel and tensor-parallel internals)",
    ),
)


@functools.cache
def diff() -> dict:
    """The checked-in API diff (4.57 -> the pinned 5.x)."""
    return json.loads(resources.files("loadguard.workarounds").joinpath("data/api_diff.json").read_text())


@functools.cache
def removed() -> dict[str, dict[str, str | None]]:
    """{module: {name: where 4.57's object lived}} for every module-level name the diff lists as gone."""
    out: dict[str, dict[str, str | None]] = {}
    for entry in diff()["entries"]:
        if entry["id"].startswith("name:"):
            _, module, name = entry["id"].split(":", 2)
            if name not in OWNED_ELSEWHERE:
                out.setdefault(module, {})[name] = entry.get("origin")
    return out


# -------------------------------------------------------------------------------------------------------------
# stand-ins with 4.57's meaning, for names whose home 5.x removed too


def find_pruneable_heads_and_indices(heads, n_heads: int, head_size: int, already_pruned_heads):
    """4.57 ``transformers.pytorch_utils``: the heads to prune (minus those already pruned) and the flat indices to keep."""
    import torch

    mask = torch.ones(n_heads, head_size)
    heads = set(heads) - already_pruned_heads
    for head in heads:
        head = head - sum(1 if h < head else 0 for h in already_pruned_heads)
        mask[head] = 0
    mask = mask.view(-1).contiguous().eq(1)
    index = torch.arange(len(mask))[mask].long()
    return heads, index


def prune_linear_layer(layer, index, dim: int = 0):
    """4.57 ``transformers.pytorch_utils``: a new ``nn.Linear`` keeping only ``index`` along ``dim``."""
    import torch
    from torch import nn

    index = index.to(layer.weight.device)
    weight = layer.weight.index_select(dim, index).detach().clone()
    bias = None
    if layer.bias is not None:
        bias = (layer.bias.clone() if dim == 1 else layer.bias[index].clone()).detach()
    size = list(layer.weight.size())
    size[dim] = len(index)
    new = nn.Linear(size[1], size[0], bias=bias is not None).to(layer.weight.device)
    with torch.no_grad():
        new.weight.copy_(weight.contiguous())
        if bias is not None:
            new.bias.copy_(bias.contiguous())
    return new


def _availability(name: str) -> Callable[[], Any] | None:
    """``is_<package>_available`` / ``_<package>_available`` / ``_<package>_version`` as 4.x computed them: whether the
    package imports here, its installed version."""
    match = re.match(r"^_?(?:is_)?(?P<package>[a-z0-9_]+?)_(?P<what>available|version)$", name)
    if match is None:
        return None
    package, what = match["package"], match["what"]

    def installed() -> bool:
        try:
            return importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):
            return False

    if what == "version":

        def version() -> str:
            try:
                return importlib.metadata.version(package.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:
                return "N/A"

        return version
    if name.startswith("_"):
        return installed
    return lambda: lambda *args, **kwargs: installed()


def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length: int = 0):
    """Older 4.x (Llama, OPT, Bart, Mistral ... before 4.36): an additive causal mask (bsz, 1, tgt, tgt + past)."""
    from ._attn_mask_v4 import AttentionMaskConverter

    return AttentionMaskConverter._make_causal_mask(input_ids_shape, dtype, device, past_key_values_length)


def _expand_mask(mask, dtype, tgt_len=None):
    """Older 4.x: a padding mask (bsz, src) as an additive mask (bsz, 1, tgt, src)."""
    from ._attn_mask_v4 import AttentionMaskConverter

    return AttentionMaskConverter._expand_mask(mask, dtype, tgt_len)


def _bloom_make_causal_mask(input_ids_shape, device, past_key_values_length: int):
    """Older 4.x Bloom: a boolean mask, True where a position may not be attended."""
    import torch

    batch_size, target_length = input_ids_shape
    mask = torch.empty((target_length, target_length + past_key_values_length), dtype=torch.bool, device=device)
    seq_ids = torch.arange(target_length, device=device)
    mask[:, past_key_values_length:] = seq_ids[:, None] < seq_ids[None, :]
    if past_key_values_length > 0:
        mask[:, :past_key_values_length] = False
    return mask[None, None, :, :].expand(batch_size, 1, target_length, target_length + past_key_values_length)


def _bloom_expand_mask(mask, tgt_length):
    """Older 4.x Bloom: a padding mask (bsz, src) as a boolean mask (bsz, 1, tgt, src), True where padded."""
    return (~(mask[:, None, None, :].to(bool))).expand(
        mask.shape[0], 1, tgt_length if tgt_length is not None else mask.shape[1], mask.shape[1]
    )


# helpers native model modules had before 4.57 (so the 4.57 diff cannot list them), still imported by remote code
OLDER = {"_make_causal_mask": _make_causal_mask, "_expand_mask": _expand_mask}
OLDER_BLOOM = {"_make_causal_mask": _bloom_make_causal_mask, "_expand_mask": _bloom_expand_mask}
_MODELING = re.compile(r"^transformers\.models\.(\w+)\.modeling_\w+$")


OWN: dict[str, Callable[[], Any]] = {
    "find_pruneable_heads_and_indices": lambda: find_pruneable_heads_and_indices,
    "prune_linear_layer": lambda: prune_linear_layer,
}


def provider(module: str, name: str, origin: str | None) -> Callable[[], Any] | None:
    """How to give back ``module.name`` on the running transformers, or None when nothing can."""
    native_model = _MODELING.match(module)
    if native_model is not None and name in OLDER:
        older = OLDER_BLOOM if native_model.group(1) == "bloom" else OLDER
        return lambda: older[name]
    if name in OWN:
        return OWN[name]
    if origin is not None and origin.startswith("value:"):
        value = json.loads(origin[len("value:") :])
        return lambda: value
    if origin is not None and _resolves(origin):
        return lambda: _resolve(origin)
    variant = _ATTENTION_VARIANT.match(name)
    if variant is not None:
        target = f"{variant['prefix']}Attention"
        return (lambda: getattr(importlib.import_module(module), target)) if target in _names(module) else None
    if name.endswith("_ATTENTION_CLASSES"):
        classes = [
            n for n in _names(module) if n.endswith(("SelfAttention", "Attention")) and not _ATTENTION_VARIANT.match(n)
        ]
        if classes:
            chosen = sorted(classes, key=lambda n: (not n.endswith("SelfAttention"), len(n)))[0]
            return lambda: dict.fromkeys(
                ("eager", "sdpa", "flash_attention_2"), getattr(importlib.import_module(module), chosen)
            )
        return None
    if name == "logger":
        return lambda: importlib.import_module("transformers.utils.logging").get_logger(module)
    return _availability(name)


def _resolve(origin: str):
    module, _, qualname = origin.partition(":")
    value: Any = importlib.import_module(module)
    for part in qualname.split(".") if qualname else ():
        value = getattr(value, part)
    return value


@functools.cache
def _resolves(origin: str) -> bool:
    try:
        _resolve(origin)
    except Exception:
        return False
    return True


def _names(module: str) -> list[str]:
    try:
        return list(vars(importlib.import_module(module)))
    except Exception:
        return []


def declined(entry_id: str) -> str | None:
    """Why the diff entry ``entry_id`` has no stand-in (None: it has one, or it is not a name entry)."""
    return next((reason for pattern, reason in DECLINED if re.match(pattern, entry_id)), None)


class _Patcher:
    """Gives each module of the diff a ``__getattr__`` serving its removed names, now or when it is first imported."""

    def __init__(self, usage: Usage, used: set[str]):
        self.usage, self.used, self.patched = usage, used, {}

    def patch(self, module) -> None:
        gone = dict(removed().get(module.__name__, {}))
        if _MODELING.match(module.__name__):  # the older helpers, in every native model module
            gone.update({name: None for name in OLDER if name not in vars(module)})
        if not gone or module.__name__ in self.patched:
            return
        previous = module.__dict__.get("__getattr__")
        usage, used = self.usage, self.used

        def __getattr__(name: str):
            if name in gone and name not in module.__dict__:
                make = provider(module.__name__, name, gone[name])
                if make is not None:
                    usage.count += 1
                    used.add(f"{module.__name__}.{name}")
                    return make()
            if previous is not None:
                return previous(name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__
        self.patched[module.__name__] = (module, previous)

    def undo(self) -> None:
        for module, previous in self.patched.values():
            if previous is None:
                module.__dict__.pop("__getattr__", None)
            else:
                module.__getattr__ = previous


def _imports_a_removed_name(source: str) -> bool:
    """Whether ``source`` imports, from a transformers module, a name the diff lists as gone from that module."""

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    gone = removed()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("transformers"):
            if any(alias.name in gone.get(node.module, {}) for alias in node.names):
                return True
    return False


def _removed_names_pattern() -> str:
    names = sorted({name for gone in removed().values() for name in gone} | set(OLDER))
    return (
        r"(cannot import name '("
        + "|".join(map(re.escape, names))
        + r")' from 'transformers|module 'transformers[\w.]*' has no attribute '("
        + "|".join(map(re.escape, names))
        + r")')"
    )


@workaround(
    "v4-module-names",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that imports a name transformers 4.57 had and 5.x removed (the API diff: re-exports such as "
    "Optional or BaseModelOutputWithPast from a model module, find_pruneable_heads_and_indices, is_*_available, "
    "<X>SdpaAttention ...): given back from its 5.x home, as 4.57's stand-in, or 4.57's value",
    upstream="the model's repository (import from the name's current home)",
    fixes=[("ImportError", _removed_names_pattern()), ("AttributeError", _removed_names_pattern())],
    native=lambda: int(importlib.import_module("transformers").__version__.split(".")[0]) < 5,
    touches=lambda sources: any(_imports_a_removed_name(source) for source in sources),
    source_fix="by hand: import each name from its transformers 5 home (the workaround's detail lists the names the load used)",
)
@contextlib.contextmanager
def module_names(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    used: set[str] = set()
    patcher = _Patcher(usage, used)

    def wanted(name: str) -> bool:
        return name in removed() or _MODELING.match(name) is not None

    for name in list(sys.modules):
        if wanted(name):
            patcher.patch(sys.modules[name])
    hook = AfterImport(wanted, patcher.patch).install()
    try:
        yield usage
    finally:
        hook.remove()
        patcher.undo()
    if used:
        usage.detail = (
            f"gave back {', '.join(sorted(used)[:6])}"
            + (f" and {len(used) - 6} more" if len(used) > 6 else "")
            + " (removed in transformers 5)"
        )


__all__ = ["DECLINED", "OWN", "declined", "diff", "module_names", "provider", "removed"]
