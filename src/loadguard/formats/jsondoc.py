"""JSON: a command's document, indented; a list of documents (a fleet's rows, a sweep's classes) one compact document a
line (JSON Lines), so a row can be read, streamed and resumed alone."""

from __future__ import annotations

import json


def emit(output) -> str:
    document = output.document()
    if isinstance(document, list):
        return "\n".join(json.dumps(row, sort_keys=False) for row in document)
    return json.dumps(document, indent=2)


__all__ = ["emit"]
