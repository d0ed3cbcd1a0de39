"""``loadguard matrix``: models x transformers versions, each cell a scan or an audit in that version's environment
(``matrices``: cells, bisection), how verdicts moved between two versions (``changes``) and what a release changed
class by class (``native``)."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "changes": ("changes_markdown", "diff"),
        "matrices": ("Bisection", "Cell", "Matrix", "bisect", "matrix"),
    },
    modules=("matrices", "native"),
)
