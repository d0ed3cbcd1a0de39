"""What transformers and a model's code say while a model loads: heard, kept, and shown where it helps.

During a load, transformers' log records (WARNING and up) and Python warnings are collected, whatever verbosity
the user set, so a finding they explain can quote them (:func:`explaining`). They reach the user's screen exactly as
they would have without loadguard: log records through transformers' own handlers at the user's verbosity, Python
warnings re-issued after the load (the CLI keeps those for ``--verbose``).
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterable, Iterator


class _Collect(logging.Handler):
    def __init__(self, texts: list[str]):
        super().__init__(logging.WARNING)
        self.texts = texts

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.texts.append(record.getMessage())


@contextlib.contextmanager
def collected() -> Iterator[list[str]]:
    """The texts of transformers' warnings and of Python warnings issued in the block, in order.

    transformers' own handlers print no more than the user's verbosity lets them; Python warnings are re-issued
    after the block, to whatever shows them (the user's filters, or the CLI's ``--verbose``)."""
    texts: list[str] = []
    logger = logging.getLogger("transformers")
    level, effective = logger.level, logger.getEffectiveLevel()
    quieted = [(handler, handler.level) for handler in logger.handlers]
    for handler, handler_level in quieted:  # hearing WARNING must not make transformers print more than before
        handler.setLevel(max(handler_level, effective))
    collector = _Collect(texts)
    logger.addHandler(collector)
    logger.setLevel(min(effective, logging.WARNING))
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield texts
    finally:
        logger.removeHandler(collector)
        logger.setLevel(level)
        for handler, handler_level in quieted:
            handler.setLevel(handler_level)
        for message in caught:
            texts.append(f"{message.category.__name__}: {message.message}")
            warnings.warn_explicit(
                message.message, message.category, message.filename, message.lineno, source=message.source
            )


def _expanded(line: str) -> str:
    """``layers.{0, 1}.attn.mask`` as ``layers.0.attn.mask layers.1.attn.mask`` (how transformers' load report folds
    names), so a tensor's full name can be found in it."""
    match = re.search(r"(\S*?)\{([^{}]*)\}(\S*)", line)
    if not match:
        return line
    head, options, tail = match.groups()
    unfolded = " ".join(f"{head}{option.strip()}{tail}" for option in options.split(","))
    return _expanded(line[: match.start()] + unfolded + line[match.end() :])


def explaining(tensor: str, texts: Iterable[str]) -> str | None:
    """The line of a collected warning that names ``tensor`` (a whole dotted name, folds expanded), with the note the
    warning gives for its status (transformers' load report explains MISSING, UNEXPECTED, ... in its notes)."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(tensor)}(?![\w.])")
    for text in texts:
        lines = text.splitlines()
        for line in lines:
            if not pattern.search(_expanded(line)):
                continue
            cells = [cell.strip() for cell in line.split("|") if cell.strip()]
            said = " ".join(cells) if len(cells) > 1 else line.strip()
            status = cells[1] if len(cells) > 1 else None
            note = next(
                (
                    n.lstrip(" -\t")[len(status) + 1 :]
                    for n in lines
                    if status and n.lstrip(" -\t").startswith(f"{status}:")
                ),
                None,
            )
            return f"{said}: {' '.join(note.split())}" if note else said
    return None


__all__ = ["collected", "explaining"]
