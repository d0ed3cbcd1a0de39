"""What a process that forks scans builds once, before its first fork, so that no child builds it again.

A first scan in a process pays for things every later one reuses: loadguard's modules that the scan imports inside
functions, transformers' checkpoint-conversion table (about a thousand regular expressions compiled on the first
``from_pretrained`` of a 5.x process), the self-check's verdict for this version, and the workarounds' failure
patterns (one lists every name 5.x removed) that a v4-era model's failing load is matched against. A forked child inherits whatever its
parent built, and loses whatever it builds itself when it exits: so a fleet that forks from a process which never
scanned pays all of it again in every child (measured: ~75 ms a model on 2 cores, a third of a small model's scan).
:func:`warm` scans a tiny built-in model once in the parent instead.
"""

from __future__ import annotations

import contextlib
import io

from .. import workarounds
from .._infra import observers
from .scanning import scan


def warm() -> bool:
    """Scan a two-layer Llama config (built in, no file, no download) in this process, silently: nothing printed,
    nothing reported to listeners. Returns whether it ran; a failure is left for the real scans to report, each in
    its own words (a warm-up only saves time)."""

    quiet = observers.silenced.set(True)
    try:
        import transformers

        config = transformers.LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=32,
            max_position_embeddings=16,
        )
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            scan(config)
        workarounds.compile_signatures()  # a clean load matches no failure: the patterns a failing one needs
        return True
    except Exception:
        return False
    finally:
        observers.silenced.reset(quiet)


__all__ = ["warm"]
