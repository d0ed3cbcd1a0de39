"""Markdown: a table to paste into a PR comment or an issue (a row per model, per cell or per changed class)."""

from __future__ import annotations


def emit(output) -> str:
    return output.markdown()


__all__ = ["emit"]
