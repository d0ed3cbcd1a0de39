"""Where a finding comes from: the line of code behind the tensor, and the warning of the load that explains it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._hf import explaining
from ..report import Finding


def located(findings: list[Finding], ref: Any, written: dict[str, str] | None = None) -> list[Finding]:
    """Each finding with the line of code behind it: the line that wrote a loaded weight after loading (``written``,
    where it was recorded), else the line that made the tensor when the model was constructed (the reference's)."""
    origins = ref.origins if ref is not None else {}
    out = []
    for finding in findings:
        site = ((written or {}).get(finding.tensor) or "").split(" (")[0] or origins.get(finding.tensor)
        out.append(replace(finding, location=site) if site and not finding.location else finding)
    return out


def explained(finding: Finding, warned) -> Finding:
    """A failing finding that a warning of the load names keeps the warning's words (the CLI hides the warnings
    themselves unless --verbose)."""
    said = explaining(finding.tensor, warned) if finding.failing and warned else None
    return replace(finding, detail=f"{finding.detail}; transformers said: {said}") if said else finding


__all__ = ["explained", "located"]
