"""v4 code past the load: what modeling code calls in ``forward`` and ``generate`` that transformers 5 removed, and
the source edits that give it back in the model's own files. Found the way the load-time set was (the API diff
4.57 -> 5.x): the v4 model methods (``get_head_mask``, ``get_extended_attention_mask``, ...) and the legacy cache
conversions (``DynamicCache.from_legacy_cache`` / ``to_legacy_cache``).

Each source edit calls a helper the file then defines: on transformers 4 the helper calls 4.x's own method (nothing
changes there: proof (b)), on 5.x it does what 4.57 did.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

from ._registry import Usage, model_code, workaround
from .remote_code import has_remote_code

PAST_THE_LOAD = (
    "v4-model-attributes",
    "v4-legacy-cache",
    "v4-generate-hooks",
    "v4-cache-layer-count",
    "v4-generate-attention-mask",
    "v4-config-use-cache",
    "v4-tied-weights-keys",
)
"""The workarounds for v4 APIs that code calls when it runs (``forward``, ``generate``) or is saved (a v4 list
``_tied_weights_keys``, which 5.x's ``save_pretrained`` reads as a mapping), which a load never meets: ``loadguard
fix`` writes their source fix when the files use what they give back and this transformers lacks it."""

# ----------------------------------------------------------------------------------------------------------------
# model methods transformers 5 removed, with 4.57's meaning


def get_extended_attention_mask(self, attention_mask, input_shape, device=None, dtype=None):
    import torch

    dtype = dtype if dtype is not None else self.dtype
    if attention_mask.dim() == 3:
        extended = attention_mask[:, None, :, :]
    elif attention_mask.dim() == 2:
        if getattr(self.config, "is_decoder", False):
            extended = create_extended_attention_mask_for_decoder(input_shape, attention_mask, device)
        else:
            extended = attention_mask[:, None, None, :]
    else:
        raise ValueError(
            f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})"
        )
    extended = extended.to(dtype=dtype)
    return (1.0 - extended) * torch.finfo(dtype).min


def create_extended_attention_mask_for_decoder(input_shape, attention_mask, device=None):
    import torch

    batch_size, seq_length = input_shape
    seq_ids = torch.arange(seq_length, device=device if device is not None else attention_mask.device)
    causal = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
    causal = causal.to(attention_mask.dtype)
    if causal.shape[1] < attention_mask.shape[1]:
        prefix = attention_mask.shape[1] - causal.shape[1]
        ones = torch.ones((batch_size, seq_length, prefix), device=causal.device, dtype=causal.dtype)
        causal = torch.cat([ones, causal], dim=-1)
    return causal[:, None, :, :] * attention_mask[:, None, None, :]


def invert_attention_mask(self, encoder_attention_mask):
    import torch

    if encoder_attention_mask.dim() == 3:
        extended = encoder_attention_mask[:, None, :, :]
    else:
        extended = encoder_attention_mask[:, None, None, :]
    extended = extended.to(dtype=self.dtype)
    return (1.0 - extended) * torch.finfo(self.dtype).min


def convert_head_mask_to_5d(self, head_mask, num_hidden_layers):
    if head_mask.dim() == 1:
        head_mask = (
            head_mask.unsqueeze(0).unsqueeze(0).unsqueeze(-1).unsqueeze(-1).expand(num_hidden_layers, -1, -1, -1, -1)
        )
    elif head_mask.dim() == 2:
        head_mask = head_mask.unsqueeze(1).unsqueeze(-1).unsqueeze(-1)
    return head_mask.to(dtype=self.dtype)


def get_head_mask(self, head_mask, num_hidden_layers, is_attention_chunked=False):
    if head_mask is None:
        return [None] * num_hidden_layers
    head_mask = convert_head_mask_to_5d(self, head_mask, num_hidden_layers)
    return head_mask.unsqueeze(-1) if is_attention_chunked else head_mask


def tie_or_clone_weights(self, output_embeddings, input_embeddings):
    from torch import nn

    if getattr(self.config, "torchscript", False):
        output_embeddings.weight = nn.Parameter(input_embeddings.weight.clone())
    else:
        output_embeddings.weight = input_embeddings.weight
    if getattr(output_embeddings, "bias", None) is not None:
        padding = output_embeddings.weight.shape[0] - output_embeddings.bias.shape[0]
        output_embeddings.bias.data = nn.functional.pad(output_embeddings.bias.data, (0, padding), "constant", 0)
    if hasattr(output_embeddings, "out_features") and hasattr(input_embeddings, "num_embeddings"):
        output_embeddings.out_features = input_embeddings.num_embeddings


def estimate_tokens(self, input_dict) -> int:
    name = getattr(self, "main_input_name", "input_ids")
    return input_dict[name].numel() if name in input_dict else 0


def floating_point_ops(self, input_dict, exclude_embeddings: bool = True) -> int:
    return 6 * estimate_tokens(self, input_dict) * self.num_parameters(exclude_embeddings=exclude_embeddings)


# ----------------------------------------------------------------------------------------------------------------
# call sites rewritten to helpers the file defines


def helper_name(name: str) -> str:
    """What a file calls its stand-in for transformers 4's ``name``: ``_v4_`` and the name, never a double underscore
    (``_extract_past_from_model_output`` -> ``_v4_extract_past_from_model_output``)."""
    return "_v4_" + name.lstrip("_")


def rewrite_calls(
    sources: dict[str, str], methods: dict[str, str], refuse: tuple[str, ...] = (), static: tuple[str, ...] = ()
) -> dict[str, str]:
    """Every call ``<obj>.<name>(args)`` of a name in ``methods`` becomes ``_v4_<name>(<obj>, args)`` (``static``:
    ``_v4_<name>(args)``), and the helpers it needs (``methods[name]``: their source) are defined after the file's
    imports. A use of a name in ``refuse`` (read, not called: nothing to define) is refused with its file and line."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from .._codemod import Refused, define_after_imports

    edited = {}
    for file, text in sources.items():
        if not file.endswith(".py") or not any(name in text for name in (*methods, *refuse)):
            continue
        wrapper = MetadataWrapper(cst.parse_module(text))
        used: list[str] = []

        class Calls(cst.CSTTransformer):
            METADATA_DEPENDENCIES = (PositionProvider,)

            def visit_Attribute(self, node):
                if node.attr.value in refuse:
                    line = self.get_metadata(PositionProvider, node).start.line
                    raise Refused(
                        f"{file}:{line} reads {node.attr.value}, which transformers 5 removed: port it by hand"
                    )
                return True

            def leave_Call(self, original, updated):
                func = updated.func
                if not isinstance(func, cst.Attribute) or func.attr.value not in methods:
                    return updated
                used.append(func.attr.value)
                head = [] if func.attr.value in static else [cst.Arg(func.value)]
                return updated.with_changes(func=cst.Name(helper_name(func.attr.value)), args=[*head, *updated.args])

        new = wrapper.visit(Calls())
        if used:
            block = "\n\n".join(methods[name] for name in dict.fromkeys(used))
            edited[file] = define_after_imports(new.code, block)
    return edited


def method_helper(name: str, function, calls: dict[str, str], on_class: bool = False) -> str:
    """``function``'s source as ``_v4_<name>``: 4.x's own method where the object (``on_class``: the class it is
    given) has it, else 4.x's meaning; its docstring is left out (it describes loadguard's copy, not the file's)."""
    lines = inspect.getsource(function).splitlines()
    body = lines[1 + _docstring_lines(function) :]
    head = lines[0].replace(f"def {function.__name__}(", f"def {helper_name(name)}(", 1)
    first = next(iter(inspect.signature(function).parameters))
    text = "\n".join(
        [
            head,
            f"    # this transformers has no {name}: 4.x's own where it exists, else what 4.x did",
            f'    if hasattr({first if on_class else f"type({first})"}, "{name}"):',
            f"        return {first}.{name}({_arguments(function)})",
            *body,
        ]
    )
    for call, attribute in calls.items():
        text = text.replace(f" {call}(", f" {helper_name(attribute)}(")
    return text + "\n"


def _docstring_lines(function) -> int:
    """How many lines the docstring of ``function`` (a one-line ``def``) takes: 0 without one."""
    import ast
    import textwrap

    definition = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    first = definition.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - definition.lineno
    return 0


def _arguments(function) -> str:
    parameters = list(inspect.signature(function).parameters.values())[1:]
    star = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return ", ".join(
        p.name
        if p.kind is p.POSITIONAL_OR_KEYWORD
        else star[p.kind] + p.name
        if p.kind in star
        else f"{p.name}={p.name}"
        for p in parameters
    )


def model_methods_source_fix(sources: dict[str, str], removed: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """The v4 model methods the files call (``self.get_head_mask(...)``) become helpers the files define (4.x's own
    method where the model has it, else 4.57's code); any other of ``removed`` (a class attribute) they read is
    refused."""
    decoder_mask = "create_extended_attention_mask_for_decoder"
    helpers = {  # attribute name: (its 4.57 code, {name called in that code: the attribute it stands for})
        "get_head_mask": (get_head_mask, {"convert_head_mask_to_5d": "_convert_head_mask_to_5d"}),
        "_convert_head_mask_to_5d": (convert_head_mask_to_5d, {}),
        "get_extended_attention_mask": (get_extended_attention_mask, {decoder_mask: decoder_mask}),
        "invert_attention_mask": (invert_attention_mask, {}),
        "estimate_tokens": (estimate_tokens, {}),
        "floating_point_ops": (floating_point_ops, {"estimate_tokens": "estimate_tokens"}),
        "_tie_or_clone_weights": (tie_or_clone_weights, {}),
    }
    methods = {name: method_helper(name, function, calls) for name, (function, calls) in helpers.items()}
    methods[decoder_mask] = free_helper(create_extended_attention_mask_for_decoder)
    for name, (_, calls) in helpers.items():  # what a helper calls is defined with it
        methods[name] += "".join("\n\n" + methods[called] for called in calls.values())
    reads = tuple(name for name in removed if name not in methods)
    edited = rewrite_calls(sources, methods, reads, static=(decoder_mask,))
    return edited, "calls the v4 model methods through helpers: the model's own on transformers 4, 4.57's code on 5"


def free_helper(function) -> str:
    return inspect.getsource(function).replace(
        f"def {function.__name__}(", f"def {helper_name(function.__name__)}(", 1
    )


# ----------------------------------------------------------------------------------------------------------------
# DynamicCache.from_legacy_cache / Cache.to_legacy_cache


def from_legacy_cache(cls, past_key_values):
    """4.57's ``DynamicCache.from_legacy_cache``: a cache holding each layer's (keys, values) of the tuple."""
    cache = cls()
    for layer_idx, (key_states, value_states) in enumerate(past_key_values or ()):
        cache.update(key_states, value_states, layer_idx)
    return cache


def to_legacy_cache(self):
    """4.57's ``Cache.to_legacy_cache``: each layer's (keys, values), as a tuple."""
    return tuple((layer.keys, layer.values) for layer in self.layers)


def get_usable_length(self, new_seq_length: int, layer_idx: int = 0) -> int:
    """4.4x's ``Cache.get_usable_length`` (removed in 4.57): the cached length a new chunk can attend to."""
    try:  # 5.x: per layer, -1 where it has no bound (a dynamic cache)
        max_length = self.get_max_length(layer_idx) if hasattr(self, "get_max_length") else None
    except (TypeError, ValueError):
        max_length = None
    previous_seq_length = self.get_seq_length(layer_idx)
    if max_length is not None and max_length > 0 and previous_seq_length + new_seq_length > max_length:
        return max_length - new_seq_length
    return previous_seq_length


LEGACY_CACHE = ("from_legacy_cache", "to_legacy_cache", "get_usable_length")
"""What v4-legacy-cache gives back (the API diff's ``model:DynamicCache.*`` / ``model:Cache.*`` entries it covers)."""


def _legacy_cache_native() -> bool:
    from transformers import DynamicCache

    return all(hasattr(DynamicCache, name) for name in LEGACY_CACHE)


@workaround(
    "v4-legacy-cache",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that converts its cache with DynamicCache.from_legacy_cache / to_legacy_cache, or asks it "
    "get_usable_length (4.3x-4.5x style; transformers 5 removed them): given back to transformers' cache classes with 4.57's meaning",
    upstream="the model's repository (pass Cache objects through; transformers 5 has no legacy tuple format)",
    fixes=[
        ("AttributeError", r"type object '\w*Cache' has no attribute 'from_legacy_cache'"),
        ("AttributeError", r"'\w*Cache' object has no attribute '(to_legacy_cache|get_usable_length)'"),
    ],
    native=_legacy_cache_native,
    touches=r"\b(from_legacy_cache|to_legacy_cache|get_usable_length)\b",
    source_fix=lambda sources, config, model: (
        _rewrite_legacy_cache(sources),
        "converts legacy caches through helpers: transformers 4's own methods there, 4.57's meaning on 5",
    ),
)
@contextlib.contextmanager
def legacy_cache(path, config: dict) -> Iterator[Usage]:
    from transformers import cache_utils

    usage = Usage()
    given = []
    base = cache_utils.DynamicCache
    if not hasattr(base, "from_legacy_cache"):
        base.from_legacy_cache = classmethod(from_legacy_cache)
        given.append("from_legacy_cache")
    for name, method in (("to_legacy_cache", to_legacy_cache), ("get_usable_length", get_usable_length)):
        if not hasattr(cache_utils.Cache, name):
            setattr(cache_utils.Cache, name, method)
            given.append(name)
    sources = "\n".join(model_code(path))
    usage.count = sum(sources.count(name) for name in given)
    try:
        yield usage
    finally:  # transformers' own classes are given back as they were: no process-wide change outlives the block
        for name in given:
            delattr(base if name == "from_legacy_cache" else cache_utils.Cache, name)
    if usage.count:
        usage.detail = f"gave DynamicCache {' and '.join(given)} with transformers 4.57's meaning while it was active"


def legacy_helpers() -> dict[str, str]:
    """The helpers the legacy-cache source fix writes into a file: 4.x's own methods where the cache has them, else
    the functions above."""
    return {
        "from_legacy_cache": method_helper("from_legacy_cache", from_legacy_cache, {}, on_class=True),
        "get_usable_length": method_helper("get_usable_length", get_usable_length, {}),
        "to_legacy_cache": method_helper("to_legacy_cache", to_legacy_cache, {}),
    }


def _rewrite_legacy_cache(sources: dict[str, str]) -> dict[str, str]:
    return rewrite_calls(sources, legacy_helpers())
