"""The source edits ``before_import`` workarounds stand for (``loadguard fix``): each takes the model's files by name
(``*.py`` and ``config.json``) and returns ``(changed files, what it did)``. Edits of Python go through libcst
(:mod:`loadguard._codemod.write`); an edit that cannot be made raises :class:`loadguard._codemod.Refused`."""

from __future__ import annotations

import json


def _python(sources: dict[str, str]) -> dict[str, str]:
    return {name: text for name, text in sources.items() if name.endswith(".py")}


def _changed(sources: dict[str, str], edited: dict[str, str]) -> dict[str, str]:
    return {name: text for name, text in edited.items() if text != sources[name]}


def fallback_import(
    sources: dict[str, str], name: str, modules: tuple[str, ...], fallback: str, bound: str | None = None
) -> tuple[dict[str, str], str]:
    """``from <module> import <name>`` of a name transformers 5 removed becomes a ``try`` import with 4.x's meaning as
    the fallback (the same code on 4.x, where the import works). ``bound``: the name the file imports it as (``import
    _expand_mask as _expand_mask_bloom``): only that import is replaced, and ``fallback`` defines that name."""
    import libcst as cst

    from .._codemod import define_after_imports

    edited = {}
    for file, text in _python(sources).items():
        tree = cst.parse_module(text)
        found: list[str] = []

        class Drop(cst.CSTTransformer):
            def leave_ImportFrom(self, original, updated):
                module = cst.Module(body=[]).code_for_node(updated.module) if updated.module is not None else ""
                if module not in modules or isinstance(updated.names, cst.ImportStar):
                    return updated
                kept = [
                    a
                    for a in updated.names
                    if not (a.evaluated_name == name and (bound is None or (a.evaluated_alias or name) == bound))
                ]
                if len(kept) == len(updated.names):
                    return updated
                found.append(module)
                if not kept:
                    return cst.RemoveFromParent()
                return updated.with_changes(names=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in kept])

        new = tree.visit(Drop())
        if found:
            alias = f" as {bound}" if bound and bound != name else ""
            body = "\n".join("    " + line if line.strip() else "" for line in fallback.splitlines())
            block = f"try:\n    from {found[0]} import {name}{alias}\nexcept ImportError:  # removed in transformers 5\n{body}\n"
            edited[file] = define_after_imports(new.code, block)
    return edited, f"imports {name} where transformers has it, else defines it as transformers 4 did"


_ROPE_HELPER = """def _v4_rope_scaling(value):
    # transformers 5 turns rope_scaling: null into {"rope_type": "default", "rope_theta": ...}: None again, as 4.x had it
    plain = isinstance(value, dict) and value.get("rope_type", "default") == "default" and set(value) <= {"rope_type", "rope_theta", "partial_rotary_factor"}
    return None if plain else value
"""


def rope_scaling_reads(sources: dict[str, str]) -> tuple[dict[str, str], str]:
    """Reads of ``<...>.rope_scaling`` go through a helper the file defines, giving plain RoPE back as None (what 4.x
    configs held: the code's own ``if rope_scaling is None`` branch runs again); on 4.x the value passes unchanged."""
    from .._codemod import define_after_imports, reads_through

    edited = {}
    for file, text in _python(sources).items():
        new, count = reads_through(text, "rope_scaling", "_v4_rope_scaling")
        if count:
            edited[file] = define_after_imports(new, _ROPE_HELPER)
    return (
        edited,
        "reads config.rope_scaling through _v4_rope_scaling: plain RoPE is None again, as in transformers 4 configs",
    )


def llama_attention_imports(sources: dict[str, str]) -> tuple[dict[str, str], str]:
    from .._codemod import import_as

    renamed = {"LlamaFlashAttention2": "LlamaAttention", "LlamaSdpaAttention": "LlamaAttention"}
    edited = {
        file: import_as(text, "transformers.models.llama.modeling_llama", renamed)
        for file, text in _python(sources).items()
    }
    return (
        _changed(sources, edited),
        "imports LlamaAttention under the removed LlamaFlashAttention2 / LlamaSdpaAttention names (one class for every kernel since 4.4x)",
    )


def read_with_defaults(sources: dict[str, str], defaults: dict[str, object]) -> tuple[dict[str, str], str]:
    from .._codemod import config_reads

    edited = {file: config_reads(text, defaults) for file, text in _python(sources).items()} if defaults else {}
    read = sorted(n for n in defaults if any(f".{n}" in text for text in _changed(sources, edited).values()))
    return _changed(
        sources, edited
    ), f"reads {', '.join(read) or 'the 4.x config attributes'} with getattr and transformers 4's default"


def accepting(sources: dict[str, str], function: str, description: str) -> tuple[dict[str, str], str]:
    from .._codemod import accept_keywords

    return _changed(
        sources, {file: accept_keywords(text, function) for file, text in _python(sources).items()}
    ), description


def renamed_auto_map(sources: dict[str, str], renamed: dict[str, str]) -> tuple[dict[str, str], str]:
    """config.json's ``auto_map`` entries named after removed auto classes, renamed to their transformers 5 names (which
    transformers 4.57 knows too); the order of keys and everything else is kept."""
    text = sources.get("config.json")
    if text is None:
        return {}, "no config.json"
    document = json.loads(text)
    auto_map = document.get("auto_map") or {}
    if not any(k in renamed for k in auto_map):
        return {}, "no removed auto class in auto_map"
    document["auto_map"] = {
        renamed.get(k, k) if renamed.get(k, k) not in auto_map else k: v for k, v in auto_map.items()
    }
    return {
        "config.json": json.dumps(document, indent=2) + "\n"
    }, "config.json's auto_map names AutoModelForImageTextToText / AutoModelForCausalLM for the removed auto classes"


__all__ = [
    "accepting",
    "fallback_import",
    "llama_attention_imports",
    "read_with_defaults",
    "renamed_auto_map",
    "rope_scaling_reads",
]
