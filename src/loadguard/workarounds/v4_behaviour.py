"""Workarounds for transformers 4.x *behaviour* that published remote code relies on and no diff of names shows.

The API diff (:mod:`loadguard.workarounds.v4_names`) gives back every name 4.57 had and 5.x dropped. These give back
what a name still present now *does* differently, found by the survey in ``data/v4_behaviour.json`` (idiom, how to
recognise it, what 5.x does, the workaround or why none): each only while a load (or a construction of the model's
class) runs, each only when the running transformers behaves the new way, each counting what it changed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import sys
import textwrap
from collections.abc import Iterator

from ._registry import Usage, workaround
from ._source_fixes import accepting
from .remote_code import has_remote_code
from .v4_api import on_new_subclasses, takes_keywords
from .v4_standins import definition_named, v4_default_rope_parameters

# ----------------------------------------------------------------------------------------------------
# ROPE_INIT_FUNCTIONS["default"]


class _V4RopeFunctions(dict):
    """The registry as remote code imported during a load sees it: 5.x's functions plus 4.x's ``"default"``,
    counting each lookup of it."""

    usage: Usage

    def __missing__(self, key):
        if key != "default":
            raise KeyError(key)
        self.usage.count += 1
        return v4_default_rope_parameters

    def get(self, key, default=None):
        return self[key] if key in self or key == "default" else default


def rope_default_source_fix(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], str]:
    """A file that imports ``ROPE_INIT_FUNCTIONS`` gets 4.x's ``"default"`` entry back where the registry lacks it (the
    same function the workaround gives, defined in the file): on transformers 4 the key is there and nothing changes."""
    from .._codemod import define_after_imports

    definition = definition_named(v4_default_rope_parameters, "_v4_default_rope_parameters")
    block = (
        'if "default" not in ROPE_INIT_FUNCTIONS:  # transformers 5 dropped plain RoPE from the registry: 4.x\'s entry\n\n'
        + textwrap.indent(definition, "    ", lambda line: bool(line.strip()))
        + '\n    ROPE_INIT_FUNCTIONS = {**ROPE_INIT_FUNCTIONS, "default": _v4_default_rope_parameters}\n'
    )
    changed = {}
    for name, text in sources.items():
        if not name.endswith(".py") or "_v4_default_rope_parameters" in text:
            continue
        imports = re.search(
            r"^from transformers\.modeling_rope_utils import [^\n]*\bROPE_INIT_FUNCTIONS\b", text, re.M
        )
        if imports is not None and re.search(r"ROPE_INIT_FUNCTIONS\s*(\[|\.get\()", text):
            changed[name] = define_after_imports(text, block)
    return (
        changed,
        "gives ROPE_INIT_FUNCTIONS transformers 4's 'default' entry (plain RoPE) where transformers lacks it",
    )


@workaround(
    "v4-rope-init-default",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code (4.4x-era copies of Llama's rotary embedding) that looks up ROPE_INIT_FUNCTIONS['default']: "
    "transformers 5 computes plain RoPE elsewhere and dropped the key (KeyError: 'default'); the model's code gets "
    "4.x's default RoPE function back, reading rope_theta as 4.x did",
    upstream="the model's repository (compute plain RoPE in the model, as transformers' own models now do)",
    fixes=[("KeyError", r"^'default'$")],
    native=lambda: "default" in importlib.import_module("transformers.modeling_rope_utils").ROPE_INIT_FUNCTIONS,
    touches=r"ROPE_INIT_FUNCTIONS\s*(\[|\.get\()",
    source_fix=rope_default_source_fix,
)
@contextlib.contextmanager
def rope_init_default(path, config: dict) -> Iterator[Usage]:
    usage = Usage()
    rope_utils = importlib.import_module("transformers.modeling_rope_utils")
    original = rope_utils.ROPE_INIT_FUNCTIONS
    if "default" in original:  # 4.x: the key is there
        yield usage
        return
    # transformers' own modules bound the original dict when they were imported and keep it (their _init_weights
    # layers a module's own default over it); code imported from here on binds this copy
    functions = _V4RopeFunctions(original)
    functions.usage = usage
    rope_utils.ROPE_INIT_FUNCTIONS = functions
    try:
        yield usage
    finally:
        rope_utils.ROPE_INIT_FUNCTIONS = original
    usage.detail = "gave the model's code ROPE_INIT_FUNCTIONS['default'] (plain RoPE), as transformers 4.x had it"


# ----------------------------------------------------------------------------------------------------
# attention-support probes: `_supports_sdpa` as a property that asks a submodule

PROBES = ("_supports_sdpa", "_supports_flash_attn_2", "_supports_flash_attn", "_supports_flex_attn")
_ANY_PROBE = "(" + "|".join(PROBES) + ")"


def _probe_properties(cls: type) -> dict[str, tuple[type, property]]:
    """The attention-support flags ``cls`` answers with a property of its own code (not transformers')."""
    found: dict[str, tuple[type, property]] = {}
    for klass in cls.__mro__:
        if (klass.__module__ or "").startswith("transformers."):
            break
        for name in PROBES:
            value = vars(klass).get(name)
            if isinstance(value, property) and name not in found:
                found[name] = (klass, value)
    return found


def attention_probe_source_fix(sources: dict[str, str], config: dict, model) -> tuple[dict[str, str], str]:
    """Each attention-support property of the model's code answers as its class did (True) while the submodule it asks
    does not exist yet, as the workaround makes it answer; once constructed it asks the submodule as before."""
    import libcst as cst

    changed, names = {}, set()
    for file, text in sources.items():
        if not file.endswith(".py") or not any(name in text for name in PROBES):
            continue

        class Guard(cst.CSTTransformer):
            def leave_FunctionDef(self, original, updated):
                decorated = any(
                    isinstance(d.decorator, cst.Name) and d.decorator.value == "property" for d in updated.decorators
                )
                if not decorated or updated.name.value not in PROBES:
                    return updated
                names.add(updated.name.value)
                body = cst.Module(body=list(updated.body.body)).code
                guarded = cst.parse_statement(
                    "try:\n"
                    + "".join(f"    {line}\n" if line.strip() else "\n" for line in body.splitlines())
                    + "except AttributeError:  # asked before the submodule exists: the class's answer in transformers 4\n    return True\n"
                )
                return updated.with_changes(body=updated.body.with_changes(body=[guarded]))

        new = cst.parse_module(text).visit(Guard()).code
        if new != text:
            changed[file] = new
    return (
        changed,
        f"{', '.join(sorted(names))} answer{'s' if len(names) == 1 else ''} True while the submodule they ask does not exist yet",
    )


@workaround(
    "v4-attention-probe",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code whose _supports_sdpa / _supports_flash_attn_2 is a property asking a submodule "
    "(return self.language_model._supports_sdpa): transformers before 4.5x read the flag on the class before "
    "construction (the property object, truthy: supported); 4.5x and 5.x read it on the instance inside "
    "PreTrainedModel.__init__, before the submodule exists (AttributeError). While the model is constructed, a "
    "property that cannot answer yet answers as the class did; once constructed it asks the submodule again",
    upstream="the model's repository (a class attribute, or a getattr with a default)",
    fixes=[("AttributeError", rf"has no attribute '{_ANY_PROBE}'")],
    native=lambda: False,  # every transformers since 4.5x probes the instance during __init__
    touches=rf"def\s+{_ANY_PROBE}\s*\(",
    source_fix=attention_probe_source_fix,
)
@contextlib.contextmanager
def attention_probe(path, config: dict) -> Iterator[Usage]:
    from transformers import PreTrainedModel

    usage = Usage()
    original = PreTrainedModel.__dict__.get("_check_and_adjust_attn_implementation")
    if original is None:  # a transformers that does not probe during __init__
        yield usage
        return

    def check(self, *args, **kwargs):
        patched = []
        for name, (klass, prop) in _probe_properties(type(self)).items():

            def answer(instance, getter=prop.fget):
                try:
                    return getter(instance)
                except AttributeError:  # the submodule it asks does not exist yet: the class's answer, as 4.x got it
                    usage.count += 1
                    return True

            setattr(klass, name, property(answer, prop.fset, prop.fdel, prop.__doc__))
            patched.append((klass, name, prop))
        try:
            return original(self, *args, **kwargs)
        finally:
            for klass, name, prop in patched:
                setattr(klass, name, prop)

    PreTrainedModel._check_and_adjust_attn_implementation = check
    try:
        yield usage
    finally:
        PreTrainedModel._check_and_adjust_attn_implementation = original
    usage.detail = "answered the model's attention-support properties as their class did while it was constructed, as transformers 4.x read them"


# ----------------------------------------------------------------------------------------------------
# from_pretrained of a sub-model inside the model's own __init__


def _refuses_loads_on_meta() -> bool:
    """Whether the running transformers refuses a from_pretrained under a meta device context (5.x does; 4.57 loads)."""
    import torch

    try:
        from transformers.integrations.accelerate import check_and_set_device_map
    except ImportError:
        return False
    try:
        with torch.device("meta"):
            check_and_set_device_map(None)
    except RuntimeError:
        return True
    return False


def _inside_a_constructor() -> bool:
    """Whether the caller runs inside some ``nn.Module.__init__`` (a model's constructor loading a sub-model)."""

    import torch

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), torch.nn.Module):
            return True
        frame = frame.f_back
    return False


@workaround(
    "v4-nested-from-pretrained",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that loads a pretrained sub-model in its own __init__ (self.trunk = AutoModel.from_pretrained(...)): "
    "transformers 5 constructs the model under the meta device and refuses a from_pretrained there (RuntimeError: ... meta "
    "device context manager); 4.x loaded it and then the outer checkpoint's values over it. While a model is being "
    "constructed, the sub-model is built from its config instead, so the outer load gives it the checkpoint's values as "
    "4.x ended up with (a sub-model the outer checkpoint lacks is reported missing, where 4.x kept its own weights)",
    upstream="the model's repository (build the sub-model from its config: the outer checkpoint holds its weights)",
    # the second: the same nested load where parameters are created on meta (accelerate's init_empty_weights, as a
    # reference is built), refused by hub kernels
    fixes=[
        ("RuntimeError", r"from_pretrained` with a meta device context manager"),
        ("ValueError", r"^Unsupported device type 'meta'"),
    ],
    native=lambda: not _refuses_loads_on_meta(),
    touches=r"\.from_pretrained\(",
    source_fix="cannot be made mechanically: the constructor loads another model; build the sub-model from its config there (the outer checkpoint holds its weights)",
)
@contextlib.contextmanager
def nested_from_pretrained(path, config: dict) -> Iterator[Usage]:
    from transformers import AutoConfig, PreTrainedModel

    usage = Usage()
    original = PreTrainedModel.__dict__["from_pretrained"]

    def from_pretrained(cls, name_or_path, *args, **kwargs):
        if not _inside_a_constructor():  # a load of its own
            return original.__func__(cls, name_or_path, *args, **kwargs)
        usage.count += 1
        trust = kwargs.pop("trust_remote_code", None)
        sub_config = kwargs.pop("config", None) or AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust)
        return cls._from_config(sub_config, **{k: v for k, v in kwargs.items() if k == "add_pooling_layer"})

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)
    try:
        yield usage
    finally:
        PreTrainedModel.from_pretrained = original
    usage.detail = "built the sub-models the model's constructor loads from their configs; the outer checkpoint gave them their values"


# ----------------------------------------------------------------------------------------------------
# GenerationConfig.validate(self): 5.x calls it with user_set_attributes= (and strict=)


def _validate_passes_keywords() -> bool:
    """Whether the running transformers calls ``GenerationConfig.validate`` with keywords (5.x: user_set_attributes)."""
    from transformers import GenerationConfig

    return takes_keywords(GenerationConfig.validate, "user_set_attributes")


@workaround(
    "v4-generation-validate",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code whose GenerationConfig subclass overrides validate(self) (diffusion-LM and other custom generate "
    "code written for transformers 4): 5.x constructs it calling validate(user_set_attributes=...) (TypeError); the "
    "override is called the 4.x way, without the keywords",
    upstream="the model's repository (accept **kwargs in validate)",
    fixes=[("TypeError", r"validate\(\) got an unexpected keyword argument '(user_set_attributes|strict)'")],
    native=lambda: not _validate_passes_keywords(),
    touches=r"def validate\(\s*self\s*\)",
    source_fix=lambda sources, config, model: accepting(
        sources,
        "validate",
        "GenerationConfig.validate accepts the keywords transformers 5 passes (user_set_attributes=, strict=)",
    ),
)
@contextlib.contextmanager
def generation_validate(path, config: dict) -> Iterator[Usage]:

    from transformers import GenerationConfig

    usage = Usage()
    adapted: list[str] = []

    def patch(cls) -> None:
        own = vars(cls).get("validate")
        if own is None or takes_keywords(own, "user_set_attributes"):
            return

        @functools.wraps(own)
        def validate(self, *args, **kwargs):
            usage.count += 1
            return own(self)  # the 4.x way: no keywords

        cls.validate = validate
        adapted.append(cls.__name__)

    with on_new_subclasses(GenerationConfig, patch) if _validate_passes_keywords() else contextlib.nullcontext():
        yield usage
    if adapted:
        usage.detail = f"called {', '.join(adapted)}.validate() the 4.x way, without transformers 5's keywords"


__all__ = ["PROBES", "v4_default_rope_parameters"]
