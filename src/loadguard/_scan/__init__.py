"""The scan: what a load would get wrong, predicted without reading a weight (``scanning``: transformers' own pipeline fed
meta tensors; ``source``: config, code and checkpoint headers, local or from the Hub); fleets of models each in a
child (``fleet``), every native class (``native``), the scan's self-check against a full audit (``selfcheck``), and
what a forking process builds once (``warm``)."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "fleet": ("DEFAULT_TIMEOUT", "scan_fleet", "scan_fleet_spawned", "scan_many", "scan_row", "trustworthy"),
        "scanning": ("scan", "scan_with_model"),
        "warmup": ("warm",),
    },
    modules=("native", "selfcheck"),
)
