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

from ._builder import build, build_model
from ._entries import ENTRIES, ExpectedFinding, ZooEntry, entries, get

__all__ = ["ENTRIES", "ExpectedFinding", "ZooEntry", "build", "build_model", "entries", "get"]
