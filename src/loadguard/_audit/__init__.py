"""The audit: a loaded model compared, tensor by tensor, with what its code computes (``reference``) and its checkpoint
holds; every tensor once (``inventory``), the checks as small pure functions (``checks``, with ``leftover`` and
``equality``), the line behind a finding (``where``), then ``repair``, ``load`` (load, audit, apply a policy), the
``after_load`` workarounds an audit decides, and standalone reproducers."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "auditing": (
            "audit",
            "check_summary",
            "computed_state",
            "meta_leftovers",
            "resolve_reference",
            "tied_weights",
            "versions",
        ),
        "checks": ("CONSTANT_FILL_NOTE",),
        "inventory": ("Inventory",),
        "loading": (
            "UNREPAIRED_HINT",
            "attach",
            "describe_failures",
            "describe_unrepaired",
            "held",
            "load",
            "load_unaudited",
        ),
        "reference": ("default_dtype", "persistent_buffers_needed"),
        "repairing": ("repair",),
        "reproducer": ("write_reproducers",),
        "where": ("located",),
        "workaround_audit": ("after_load", "audit_after_load"),
    },
    modules=("checks",),
)
