"""A model's files, read without transformers: its config (``config``; ``preflight``: what can be said before torch is
imported), its checkpoint tensor by tensor (``checkpoint``; ``headers``: a ``.bin``'s keys without its data; ``pages``:
whether a tensor is still the file's bytes), checkpoint keys mapped to model names (``keymap``), and the Hub
(``hub``)."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "checkpoint": (
            "BIN_INDEX",
            "BIN_SINGLE",
            "Checkpoint",
            "SAFETENSORS_DTYPES",
            "SAFETENSORS_INDEX",
            "SAFETENSORS_SINGLE",
            "index_files",
            "shard_names",
        ),
        "config": ("config_dict", "folder_of", "local_config"),
        "headers": ("bin_header",),
        "hub": ("failure", "is_hub_id", "local_snapshot"),
        "keymap": ("KeyMap", "map_keys"),
        "pages": ("PageOracle",),
        "preflight": ("HUB_ID", "exists", "hub_offline", "missing", "read_config"),
    },
    modules=("hub",),
)
