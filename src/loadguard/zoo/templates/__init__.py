"""Remote-code templates written verbatim into zoo model folders.

Each sub-package is a complete ``trust_remote_code`` model: the files here are copied as they are next to
``config.json`` and imported by transformers from there. They are also importable from loadguard itself so
the zoo builder constructs the very same classes that ``from_pretrained`` later loads.
"""
