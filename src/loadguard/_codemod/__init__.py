"""Model code as a concrete syntax tree (libcst): reading how a recorded line becomes an ``_init_weights`` branch
(``read``), writing edits that keep everything else of the file as it was (``write``), and the small node readers
both share (``nodes``). Pure functions of source text: what ``loadguard fix`` and the workarounds' source fixes
edit."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "layout": ("fit", "preferred_quote", "requote", "string_literal", "width_of"),
        "nodes": ("after_docstring", "bound_names", "import_of", "parameters_of", "parse_error"),
        "read": ("Branch", "Refused", "recompute"),
        "rewrite": ("accept_keywords", "config_reads", "import_as", "reads_through"),
        "write": (
            "add_branches",
            "append_to_init",
            "class_assignments",
            "define_after_imports",
            "ensure_imports",
            "guard_writes",
            "init_weights_parameter",
            "keep_arguments",
            "merge",
            "method_calls",
            "set_class_attribute",
        ),
    },
)
