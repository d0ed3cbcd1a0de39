"""v4 code in ``generate``: what a model's own generation hooks call, and what transformers' ``generate`` asks of a v4
config, that transformers removed or changed after the release the model was written for. Found from the API diff
(``model:GenerationMixin._extract_past_from_model_output``, last in 4.46) and from published code (ChatGLM's
``_update_model_kwargs_for_generation`` calls it; its config says ``num_layers``, never ``num_hidden_layers``).

- ``v4-generate-hooks``: ``_extract_past_from_model_output`` given back with the meaning of the 4.x the model was
  written for (config.json's ``transformers_version``): before 4.42 it returns the past, from 4.42 to 4.46 the name of
  the model's cache argument and the past.
- ``v4-cache-layer-count``: a config that does not say ``num_hidden_layers`` gets no default cache from ``generate``
  (4.57 and 5.x build one per layer and raise AttributeError; transformers before 4.36 built none, and the model keeps
  its own past as it always did).

Each source edit is a helper the file defines: on the transformers that still has the method it calls the model's own,
elsewhere it does what the model's 4.x did.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator

from packaging.version import InvalidVersion, Version

from ._registry import Usage, model_code, workaround
from .remote_code import has_remote_code
from .v4_api import on_new_subclasses
from .v4_runtime import free_helper, method_helper, rewrite_calls

HOOK = "_extract_past_from_model_output"
GENERATION_HOOKS = ("prepare_inputs_for_generation", "_update_model_kwargs_for_generation")
"""The model's own generation hooks 5.x's generate still calls: where a v4 model keeps its own past and mask."""
NAMED_FROM = Version("4.42")
"""The first release whose ``_extract_past_from_model_output`` returns ``(cache name, past)`` instead of the past."""


def past_from_model_output(self, outputs, *args, **kwargs):
    """4.41's ``GenerationMixin._extract_past_from_model_output``: the past of the model's output (5.25 calls it
    ``cache``), standardized where asked (``standardize_cache_format``, taken up to 4.43) and the model can."""
    standardize_cache_format = kwargs.get("standardize_cache_format", args[0] if args else False)
    past_key_values = None
    for name in ("cache", "past_key_values", "mems", "past_buckets_states", "cache_params"):
        if name in outputs:
            past_key_values = outputs[name]
            break
    if standardize_cache_format and hasattr(self, "_convert_to_standard_cache"):
        batch_size = outputs.logits.shape[0]
        past_key_values = self._convert_to_standard_cache(past_key_values, batch_size=batch_size)
    return past_key_values


def named_past_from_model_output(self, outputs, *args, **kwargs):
    """4.42-4.46's: the name the model's forward takes its cache by, and the past."""
    import inspect

    takes = inspect.signature(self.forward).parameters
    cache_name = "cache_params" if "cache_params" in takes and "past_key_values" not in takes else "past_key_values"
    return cache_name, past_from_model_output(self, outputs, *args, **kwargs)


def written_for(config: dict) -> Version | None:
    """The transformers release config.json says the model was saved with; None when it does not say."""
    try:
        return Version(str(config.get("transformers_version") or ""))
    except InvalidVersion:
        return None


def _named(config: dict) -> bool:
    version = written_for(config)
    return version is not None and version >= NAMED_FROM


def _hooks_native() -> bool:
    from transformers import GenerationMixin

    return hasattr(GenerationMixin, HOOK)


def hook_helpers(config: dict) -> dict[str, str]:
    """The helper the source fix writes, for the 4.x the model was written for."""
    if not _named(config):
        return {HOOK: method_helper(HOOK, past_from_model_output, {})}
    named = method_helper(HOOK, named_past_from_model_output, {"past_from_model_output": "past_from_model_output"})
    return {HOOK: named + "\n\n" + free_helper(past_from_model_output)}


@workaround(
    "v4-generate-hooks",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code whose own generation hooks (ChatGLM's _update_model_kwargs_for_generation) call "
    "GenerationMixin._extract_past_from_model_output, removed in 4.47: given to the model's classes with the meaning "
    "of the 4.x in its config.json (the past before 4.42, then (cache name, past))",
    upstream="the model's repository (read the cache from the model output, outputs.past_key_values / outputs.cache)",
    fixes=[("AttributeError", r"object has no attribute '" + HOOK + "'")],
    native=_hooks_native,
    touches=r"\b" + HOOK + r"\b",
    source_fix=lambda sources, config, model: (
        rewrite_calls(sources, hook_helpers(config)),
        "calls _extract_past_from_model_output through a helper: the model's own where transformers has it, the "
        "meaning of the 4.x it was written for elsewhere",
    ),
)
@contextlib.contextmanager
def generate_hooks(path, config: dict) -> Iterator[Usage]:
    stand_in = named_past_from_model_output if _named(config) else past_from_model_output

    def patch(cls) -> list[str]:
        if hasattr(cls, HOOK):
            return []
        setattr(cls, HOOK, stand_in)
        return [cls.__name__]

    calls = "\n".join(model_code(path)).count(HOOK)  # only code that calls it is given it
    release = "4.42-4.46" if _named(config) else "4.41"
    with given_to_model_classes(
        patch, calls > 0 and not _hooks_native(), f"gave {{}} {HOOK} as transformers {release} had it", count=calls
    ) as usage:
        yield usage


@contextlib.contextmanager
def given_to_model_classes(patch, needed: bool, said: str, count: int | None = None) -> Iterator[Usage]:
    """A workaround's block that gives the model's own classes what it stands for: ``patch(cls)`` on every
    ``PreTrainedModel`` subclass the model's code defines while it runs (where ``needed``), returning what it gave. The
    usage counts ``count`` (the code's uses) or what was given; its detail is ``said`` with those names."""
    from transformers import PreTrainedModel

    usage = Usage()
    given: list[str] = []
    with (
        on_new_subclasses(PreTrainedModel, lambda cls: given.extend(patch(cls)))
        if needed
        else contextlib.nullcontext()
    ):
        yield usage
    usage.count = len(given) if count is None else count
    if given:
        usage.detail = said.format(", ".join(given))


# ----------------------------------------------------------------------------------------------------------------
# generate's default cache, for a config that does not say how many layers it has


def no_cache_without_layers(cls):
    """``cls._supports_default_dynamic_cache``: whether ``generate`` may build its default cache for the model. Not
    when its config does not say ``num_hidden_layers`` (the cache is built one layer per hidden layer; transformers
    before 4.36 built none and the model kept its own past)."""

    def _supports_default_dynamic_cache(self):
        config = self.config.get_text_config(decoder=True) if hasattr(self.config, "get_text_config") else self.config
        if getattr(config, "num_hidden_layers", None) is None:
            return False
        return super(cls, self)._supports_default_dynamic_cache()

    return _supports_default_dynamic_cache


def _method_source() -> str:
    """:func:`no_cache_without_layers`' method as a class body writes it (``super()``), with a comment on why."""
    import inspect
    import textwrap

    text = textwrap.dedent(inspect.getsource(no_cache_without_layers(object)))
    first, rest = text.split("\n", 1)
    note = "    # its config does not say num_hidden_layers; no default cache, as transformers before 4.36\n"
    return first + "\n" + note + rest.replace("super(cls, self)", "super()")


_GENERATES = re.compile(r"^\s+def (" + "|".join(GENERATION_HOOKS) + r")\(", re.M)


_LAYER_COUNT_NAMED = re.compile(r"""["']num_hidden_layers["']\s*:|def\s+num_hidden_layers\b""")


def _says_layer_count(sources: dict[str, str], config: dict) -> bool:
    """Whether the model's config has ``num_hidden_layers``, so transformers' cache can count its layers: config.json
    holds it (every attribute a config's ``__init__`` sets is saved there), or a configuration file maps or computes
    it (an ``attribute_map`` entry, a property), which config.json does not show."""
    return "num_hidden_layers" in config or any(
        _LAYER_COUNT_NAMED.search(text) for name, text in sources.items() if name.endswith(".py") and "config" in name
    )


def _layer_count_native() -> bool:
    from transformers import GenerationMixin

    return not hasattr(GenerationMixin, "_supports_default_dynamic_cache")


def _add_cache_method(sources: dict[str, str], config: dict) -> dict[str, str]:
    """Each class of the modeling files that defines its own generation inputs gets the method above (none where the
    config names its layer count, or the class already defines it)."""
    import libcst as cst

    if _says_layer_count(sources, config):
        return {}
    method = _method_source()
    block = cst.parse_module(
        "class _:\n" + "".join(f"    {line}\n" if line else "\n" for line in method.splitlines())
    ).body[0]
    added = block.body.body[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    edited = {}
    for file, text in sources.items():
        if not file.endswith(".py") or not _GENERATES.search(text):
            continue
        tree = cst.parse_module(text)

        class Classes(cst.CSTTransformer):
            def leave_ClassDef(self, original, updated):
                names = {s.name.value for s in updated.body.body if isinstance(s, cst.FunctionDef)}
                if names & set(GENERATION_HOOKS) and "_supports_default_dynamic_cache" not in names:
                    return updated.with_changes(body=updated.body.with_changes(body=[*updated.body.body, added]))
                return updated

        new = tree.visit(Classes()).code
        if new != text:
            edited[file] = new
    return edited


@workaround(
    "v4-cache-layer-count",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code whose config does not say num_hidden_layers (ChatGLM's num_layers) and that keeps its own "
    "past in generate: transformers from 4.36 builds a default cache per layer and raises AttributeError; given no "
    "default cache, as transformers before 4.36 built none",
    upstream="the model's repository (name the layer count num_hidden_layers, or an attribute_map entry for it)",
    fixes=[("AttributeError", r"'\w*Config' object has no attribute 'num_hidden_layers'")],
    native=_layer_count_native,
    touches=r"\b(" + "|".join(GENERATION_HOOKS) + r")\b",
    source_fix=lambda sources, config, model: (
        _add_cache_method(sources, config),
        "gives the model's generating classes _supports_default_dynamic_cache: no default cache for a config "
        "without num_hidden_layers (transformers before 4.36 built none)",
    ),
)
@contextlib.contextmanager
def cache_layer_count(path, config: dict) -> Iterator[Usage]:
    def patch(cls) -> list[str]:
        if "_supports_default_dynamic_cache" in vars(cls) or not _GENERATES.search(_own_source(cls)):
            return []
        cls._supports_default_dynamic_cache = no_cache_without_layers(cls)
        return [cls.__name__]

    needed = not _layer_count_native() and not _says_layer_count(_config_files(path), config)
    said = "gave {} no default cache in generate: its config does not say num_hidden_layers"
    with given_to_model_classes(patch, needed, said) as usage:
        yield usage


def _config_files(path) -> dict[str, str]:
    from pathlib import Path

    folder = Path(str(path)) if path is not None else None
    if folder is None or not folder.is_dir():
        return {}
    return {file.name: file.read_text(errors="replace") for file in sorted(folder.glob("*config*.py"))}


# ----------------------------------------------------------------------------------------------------------------
# the attention mask generate hands the model's own hooks


_MASK_USED = re.compile(r"""attention_mask["']\]|attention_mask\s*\.\s*\w+""")
_MASK_CHECKED = re.compile(r"""attention_mask(?:["']\]|["']\))?\s+is\s+(?:not\s+)?None""")


def _uses_mask_unchecked(body: str) -> bool:
    """The hook's code reads the attention mask out of its arguments or uses something of it, and never tests it
    against None (4.x always handed it a tensor)."""
    return bool(_MASK_USED.search(body)) and not _MASK_CHECKED.search(body)


@functools.cache
def _mask_native() -> bool:
    import inspect

    from transformers import GenerationMixin

    try:  # 5.x's generate drops an all-ones mask (it records its length in _mask_length, then sets it to None)
        return "_mask_length" not in inspect.getsource(GenerationMixin.generate)
    except (OSError, TypeError):
        return True


def mask_restored(hook: str, parameters: list[str]) -> str:
    """The lines a hook begins with to see the mask as 4.x handed it: ``prepare_inputs_for_generation`` an all-ones
    mask over its input ids where generate dropped it, ``_update_model_kwargs_for_generation`` no mask key at all
    (it only ever grew a mask of ones; the next call of the first rebuilds it)."""
    note = "  # transformers 5's generate drops an all-ones attention mask; 4.x handed it over"
    if hook == "_update_model_kwargs_for_generation":
        kwargs = parameters[2] if len(parameters) > 2 else "model_kwargs"
        return f'if {kwargs}.get("attention_mask", 0) is None:{note}\n    del {kwargs}["attention_mask"]\n'
    ids = parameters[1] if len(parameters) > 1 else "input_ids"
    ones = f"{ids}.new_ones({ids}.shape[:2])"
    if "attention_mask" in parameters:
        return f"if attention_mask is None:{note}\n    attention_mask = {ones}\n"
    rest = next((p[2:] for p in parameters if p.startswith("**")), "kwargs")
    return f'if {rest}.get("attention_mask", 0) is None:{note}\n    {rest}["attention_mask"] = {ones}\n'


def _restore_mask(sources: dict[str, str]) -> dict[str, str]:
    """Each generation hook of the files that uses the mask unchecked begins with :func:`mask_restored`."""
    import libcst as cst

    from .._codemod import after_docstring, parameters_of

    edited = {}
    for file, text in sources.items():
        if not file.endswith(".py") or not any(hook in text for hook in GENERATION_HOOKS):
            continue
        tree = cst.parse_module(text)

        class Hooks(cst.CSTTransformer):
            def leave_FunctionDef(self, original, updated):
                if updated.name.value not in GENERATION_HOOKS:
                    return updated
                if not _uses_mask_unchecked(tree.code_for_node(original.body)):
                    return updated
                names = parameters_of(updated)
                star = updated.params.star_kwarg
                names += [f"**{star.name.value}"] if star is not None else []
                lines = list(cst.parse_module(mask_restored(updated.name.value, names)).body)
                body = list(updated.body.body)
                at = after_docstring(body)
                return updated.with_changes(body=updated.body.with_changes(body=[*body[:at], *lines, *body[at:]]))

        new = tree.visit(Hooks()).code
        if new != text:
            edited[file] = new
    return edited


def _mask_wrapper(hook: str, original):
    if hook == "_update_model_kwargs_for_generation":

        def update(self, outputs, model_kwargs, *args, **kwargs):
            if model_kwargs.get("attention_mask", 0) is None:
                del model_kwargs["attention_mask"]
            return original(self, outputs, model_kwargs, *args, **kwargs)

        return functools.wraps(original)(update)

    def prepare(self, input_ids, *args, **kwargs):
        if kwargs.get("attention_mask", 0) is None:
            kwargs["attention_mask"] = input_ids.new_ones(input_ids.shape[:2])
        return original(self, input_ids, *args, **kwargs)

    return functools.wraps(original)(prepare)


@workaround(
    "v4-generate-attention-mask",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code whose own generation hooks use the attention mask as a tensor (ChatGLM's mask.new_ones, "
    "Replit's mask.bool()): transformers 5's generate drops an all-ones mask and hands them None, where 4.x always "
    "handed the mask; given the mask as 4.x did",
    upstream="the model's repository (treat attention_mask=None as no padding)",
    fixes=[
        ("AttributeError", r"'NoneType' object has no attribute '(new_ones|bool|long|int|float|cumsum|shape|sum)'")
    ],
    native=_mask_native,
    touches=_MASK_USED.pattern,  # code that reads the mask or uses something of it (hooks among it)
    source_fix=lambda sources, config, model: (
        _restore_mask(sources),
        "its generation hooks see the attention mask as 4.x handed it (transformers 5 drops an all-ones mask)",
    ),
)
@contextlib.contextmanager
def generate_attention_mask(path, config: dict) -> Iterator[Usage]:
    def patch(cls) -> list[str]:
        wrapped = []
        for hook in GENERATION_HOOKS:
            own = vars(cls).get(hook)
            if callable(own) and _uses_mask_unchecked(_own_source(own)):
                setattr(cls, hook, _mask_wrapper(hook, own))
                wrapped.append(f"{cls.__name__}.{hook}")
        return wrapped

    said = "gave {} the attention mask as transformers 4 handed it"
    with given_to_model_classes(patch, not _mask_native(), said) as usage:
        yield usage


def _own_source(code) -> str:
    import inspect

    try:
        return inspect.getsource(code)
    except (OSError, TypeError):
        return ""


__all__ = ["HOOK", "given_to_model_classes", "hook_helpers", "no_cache_without_layers", "past_from_model_output"]
