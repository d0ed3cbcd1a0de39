"""``loadguard fix``: the per-model source change a broken load needs (``plan``, written through ``loadguard._codemod``),
the patched copy and its pull-request description (``files``), the proofs (``fixing``; ``prove``: the side that runs
under transformers 4, torch and transformers only) and the same change against transformers' own source
(``upstream``)."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "files": ("PROPOSE", "holds_weights", "model_folder", "model_name", "notes", "remove_stale"),
        "fixing": ("FixResult", "fix"),
        "upstream": ("upstream_patch",),
    },
)
