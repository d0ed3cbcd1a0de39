"""The v4 -> v5 API changes to configs, model classes and loading that remote code meets, from the API diff
(``workarounds/data/api_diff.json``): every attribute 4.57 set on every config, the model methods and class
attributes 5.x removed, ``tie_weights(self)`` overrides v5 calls with keywords, and auto classes 5.x removed.

Model methods and class attributes are given to the model's own classes (remote code defined while the workaround
is active), where they stay: the model runs with them after the load too. Each is defined with 4.57's meaning.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from collections.abc import Iterator
from typing import Any

from ._registry import Usage, model_code, workaround
from ._source_fixes import accepting, read_with_defaults
from .remote_code import has_remote_code
from .transformers_v4 import V4_GENERATION_DEFAULTS, config_attributes
from .v4_names import diff
from .v4_runtime import (
    convert_head_mask_to_5d,
    create_extended_attention_mask_for_decoder,
    estimate_tokens,
    floating_point_ops,
    get_extended_attention_mask,
    get_head_mask,
    invert_attention_mask,
    model_methods_source_fix,
    tie_or_clone_weights,
)


@functools.cache
def v4_config_defaults() -> dict[str, Any]:
    """Every attribute a 4.57 ``PretrainedConfig()`` carried that 5.x configs lack (generation defaults aside: they
    are ``v4-config-generation-defaults``'), with 4.57's value."""
    return {
        entry["id"].split(":", 1)[1]: entry["v4"]
        for entry in diff()["entries"]
        if entry["id"].startswith("config:")
        and entry["id"].split(":", 1)[1] not in V4_GENERATION_DEFAULTS
        and not entry["id"].startswith("config:_")
    }


def _missing_config_defaults() -> list[str]:
    from transformers import PretrainedConfig

    probe = PretrainedConfig()
    return [
        name for name in v4_config_defaults() if not hasattr(probe, name) and name not in PretrainedConfig.__dict__
    ]


@workaround(
    "v4-config-defaults",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that reads an attribute transformers 4 set on every config and 5 does not (pad_token_id, "
    "bos_token_id, eos_token_id, is_decoder, tie_word_embeddings, pruned_heads, torchscript, ...; from the API diff)",
    upstream="the model's repository (set them in its config's __init__)",
    fixes=[("AttributeError", r"Config' object has no attribute '(" + "|".join(sorted(v4_config_defaults())) + r")'")],
    native=lambda: not _missing_config_defaults(),
    touches=lambda sources: any(f"config.{name}" in source for source in sources for name in v4_config_defaults()),
    source_fix=lambda sources, config, model: read_with_defaults(
        sources, {n: v4_config_defaults()[n] for n in _missing_config_defaults()}
    ),
)
@contextlib.contextmanager
def config_defaults(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    with config_attributes({name: v4_config_defaults()[name] for name in _missing_config_defaults()}, config, usage):
        yield usage
    if usage.count:
        usage.detail = "gave the model's code transformers 4.57's config attributes (pad_token_id None, is_decoder False, ...; config.json's values where it has them)"


# -------------------------------------------------------------------------------------------------------------
# model methods and class attributes 5.x removed, with 4.57's meaning


V4_MODEL_ATTRIBUTES: dict[str, Any] = {
    "get_extended_attention_mask": get_extended_attention_mask,
    "create_extended_attention_mask_for_decoder": staticmethod(create_extended_attention_mask_for_decoder),
    "invert_attention_mask": invert_attention_mask,
    "get_head_mask": get_head_mask,
    "_convert_head_mask_to_5d": convert_head_mask_to_5d,
    "_tie_or_clone_weights": tie_or_clone_weights,
    "estimate_tokens": estimate_tokens,
    "floating_point_ops": floating_point_ops,
    "framework": property(lambda self: "pt"),
    "is_parallelizable": False,
    "_is_stateful": False,
    "_checkpoint_conversion_mapping": {},
    # class attributes of transformers 4.4x (before 4.57) that older remote code reads
    "_supports_flash_attn_2": False,
    "_supports_cache_class": False,
    "_supports_static_cache": False,
    "_supports_quantized_cache": False,
}


def _outside_transformers(cls) -> bool:
    return not (cls.__module__ or "").startswith("transformers.")


@contextlib.contextmanager
def _on_new_model_classes(patch) -> Iterator[None]:
    """``patch(cls)`` on every ``PreTrainedModel`` subclass defined outside transformers while the block runs (the
    model's remote code is imported afresh inside a ``before_import`` workaround)."""
    from transformers import PreTrainedModel

    with on_new_subclasses(PreTrainedModel, patch):
        yield


@contextlib.contextmanager
def on_new_subclasses(base: type, patch) -> Iterator[None]:
    """``patch(cls)`` on every subclass of ``base`` defined outside transformers while the block runs."""
    original = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if original is not None:
            original.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        if _outside_transformers(cls):
            patch(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)
    try:
        yield
    finally:
        if original is None:
            del base.__init_subclass__
        else:
            base.__init_subclass__ = original


_BEFORE_4_57 = {
    "_supports_flash_attn_2",
    "_supports_cache_class",
    "_supports_static_cache",
    "_supports_quantized_cache",
}


def _missing_model_attributes() -> list[str]:
    from transformers import PreTrainedModel

    return [name for name in V4_MODEL_ATTRIBUTES if not hasattr(PreTrainedModel, name)]


def _model_attributes_native() -> bool:
    """The running transformers has what 4.57 models had (4.57 itself lacks the older 4.4x class attributes too)."""
    return not [name for name in _missing_model_attributes() if name not in _BEFORE_4_57]


@workaround(
    "v4-model-attributes",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that calls or reads what transformers 4 model classes had and 5 removed "
    "(get_extended_attention_mask, get_head_mask, invert_attention_mask, _tie_or_clone_weights, framework, "
    "_supports_flash_attn_2, ...): given to the model's own classes with 4.57's meaning",
    upstream="the model's repository (port it to transformers 5's masking utilities)",
    fixes=[("AttributeError", r"object has no attribute '(" + "|".join(V4_MODEL_ATTRIBUTES) + r")'")],
    native=_model_attributes_native,
    touches=r"\b(" + "|".join(V4_MODEL_ATTRIBUTES) + r")\b",
    source_fix=lambda sources, config, model: model_methods_source_fix(sources, tuple(V4_MODEL_ATTRIBUTES)),
)
@contextlib.contextmanager
def model_attributes(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    missing = _missing_model_attributes()
    patched: list[str] = []
    sources = "\n".join(_sources(path))

    def patch(cls) -> None:
        given = [name for name in missing if not any(name in vars(k) for k in cls.__mro__)]
        for name in given:
            setattr(cls, name, V4_MODEL_ATTRIBUTES[name])
        used = [name for name in given if name in sources]
        if used:
            usage.count += 1
            patched.append(f"{cls.__name__} ({', '.join(used)})")

    with _on_new_model_classes(patch) if missing else contextlib.nullcontext():
        yield usage
    if patched:
        usage.detail = f"gave transformers 4.57's model attributes to {', '.join(patched)}"


def _sources(path) -> list[str]:

    return model_code(path)


# -------------------------------------------------------------------------------------------------------------
# tie_weights(self): 5.x calls it with missing_keys= and recompute_mapping=


def takes_keywords(function, *names: str) -> bool:
    """Whether ``function`` accepts the keyword arguments ``names`` (each by name, or through ``**kwargs``); one whose
    signature cannot be read is taken to."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True
    return all(n in parameters for n in names) or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _takes_v5_keywords(function) -> bool:
    return takes_keywords(function, "missing_keys")


@workaround(
    "v4-tie-weights-signature",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that overrides tie_weights(self): transformers 5 calls tie_weights(missing_keys=..., "
    "recompute_mapping=...); the override is called the 4.x way, then transformers 5 finishes its own tying",
    upstream="the model's repository (accept **kwargs in tie_weights)",
    fixes=[("TypeError", r"tie_weights\(\) got an unexpected keyword argument '(missing_keys|recompute_mapping)'")],
    native=lambda: not _takes_v5_keywords(importlib.import_module("transformers").PreTrainedModel.tie_weights),
    touches=r"def tie_weights\(\s*self\s*\)",
    source_fix=lambda sources, config, model: accepting(
        sources,
        "tie_weights",
        "tie_weights accepts the keywords transformers 5 passes (missing_keys=, recompute_mapping=)",
    ),
)
@contextlib.contextmanager
def tie_weights_signature(path, config: dict) -> Iterator[Usage]:
    from transformers import PreTrainedModel

    usage = Usage()
    adapted: list[str] = []

    def patch(cls) -> None:
        own = vars(cls).get("tie_weights")
        if own is None or _takes_v5_keywords(own):
            return

        @functools.wraps(own)
        def tie_weights(self, missing_keys=None, recompute_mapping=True, **kwargs):
            usage.count += 1
            own(self)  # the 4.x way: the override ties what it ties
            return PreTrainedModel.tie_weights(
                self, missing_keys=missing_keys, recompute_mapping=recompute_mapping, **kwargs
            )

        cls.tie_weights = tie_weights
        adapted.append(cls.__name__)

    with _on_new_model_classes(patch) if _takes_v5_keywords(PreTrainedModel.tie_weights) else contextlib.nullcontext():
        yield usage
    if adapted:
        usage.detail = f"called {', '.join(adapted)}.tie_weights() the 4.x way, then transformers 5's own tying"


__all__ = ["V4_MODEL_ATTRIBUTES", "v4_config_defaults"]
