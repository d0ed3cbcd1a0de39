"""The test-model zoo: real model folders that break the way real models break.

Each entry writes a complete ``trust_remote_code`` model folder (``config.json`` with ``auto_map``, the
configuration and modeling code, safetensors weights, tokenizer and, for the vision-language model, an
image processor and processor) that a plain ``from_pretrained(folder, trust_remote_code=True)`` loads.

Example::

    from loadguard import zoo

    for entry in zoo.entries():
        print(entry.name, entry.summary)
    folder = zoo.build("minicpmv_like", "/tmp/minicpmv_like")              # the demo model
    big = zoo.build("clean", "/tmp/clean-big", hidden_size=1024, num_hidden_layers=24, vocab_size=32000)
"""

import json
from pathlib import Path

from ._builder import MARKER, build, build_model
from ._entries import ENTRIES, ExpectedFinding, ZooEntry, entries, get
from ._images import demo_images


def entry_of(folder) -> ZooEntry | None:
    """The zoo entry a model folder was built from, or None when it is not a zoo folder."""
    marker = Path(folder) / MARKER
    try:
        return ENTRIES.get(json.loads(marker.read_text())["entry"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = [
    "ENTRIES",
    "ExpectedFinding",
    "ZooEntry",
    "build",
    "build_model",
    "demo_images",
    "entries",
    "entry_of",
    "get",
]
