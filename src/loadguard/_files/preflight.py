"""What can be said about a model before torch or transformers is imported (seconds of imports): the path does not
exist, is a file, holds no config.json or an unreadable one, runs code nobody trusted, or is a Hub id while offline.
The commands ask here first, so a mistyped path is answered at once; the loads ask again on their way."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .._infra import named, unreadable_because
from ..errors import HubUnreachableError, ModelConfigError, ModelNotFoundError, RemoteCodeNotTrustedError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` keeps the Hugging Face Hub out of reach."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "false", "")


def read_config(path: str | os.PathLike, trust_remote_code: bool) -> dict:
    """Pre-flight for a local folder: it exists, holds a readable config.json, and its remote code is trusted."""
    folder = Path(path)
    if not folder.exists():
        refused = missing(str(path))
        if refused is not None:
            raise refused
        if HUB_ID.match(str(path)):
            return {}
        raise ModelNotFoundError(
            f"{path} does not exist", "pass the folder that holds the model's config.json and weights"
        )
    if not folder.is_dir():
        raise ModelNotFoundError(f"{path} is a file, not a model folder", "pass the folder that holds config.json")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelConfigError(
            f"{folder} has no config.json, so it is not a transformers model folder",
            "pass the folder that holds config.json",
        )
    try:
        config = json.loads(config_file.read_text())
    except RecursionError:
        raise ModelConfigError(
            f"{named(config_file, folder)} is not a config: its JSON is nested deeper than any config's (Python's JSON "
            "reader gives up)",
            "fix or re-save the config",
        ) from None
    except (OSError, ValueError) as error:
        raise ModelConfigError(
            f"{named(config_file, folder)} is not valid JSON ({unreadable_because(error)})",
            "fix or re-save the config",
        ) from None
    auto_map = config.get("auto_map") or {}
    if auto_map and not trust_remote_code:
        files = sorted({str(v if isinstance(v, str) else v[0]).split(".")[0] + ".py" for v in auto_map.values() if v})
        raise RemoteCodeNotTrustedError(
            f"{folder} runs its own code ({', '.join(files)}) and trust_remote_code was not given",
            "read that code, then pass --trust-remote-code (trust_remote_code=True) if you trust it",
        )
    return config


def _cached(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds a config of ``repo_id`` (what an offline load would find), looked up the way
    huggingface_hub lays the cache out, without importing it."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return any((Path(cache) / f"models--{repo_id.replace('/', '--')}").glob("snapshots/*/config.json"))


def exists(text: str) -> bool:
    """Whether ``text`` names a file or folder here; a name the system cannot even look up (longer than a file name
    may be, a NUL byte) names none: a line of a ``--from`` list, never the end of the run."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def missing(text: str) -> ModelNotFoundError | None:
    """The error a load or scan of ``text`` ends with before any model code runs: ``text`` is neither a path that exists
    nor a Hub id, or a Hub id while offline with nothing cached (a ``stat``: a fleet answers such rows without a child,
    a command before torch is imported); None otherwise."""
    if exists(text):
        return None
    name = text.rpartition("@")[0] if "@" in text else text  # org/name@revision
    if HUB_ID.match(name):
        if hub_offline() and not _cached(name):
            return HubUnreachableError(
                f"{text} is not a local folder, not in the Hugging Face cache, and the Hub cannot be reached (offline: HF_HUB_OFFLINE is set)",
                "download the model first (hf download) and pass its local folder, or unset HF_HUB_OFFLINE",
            )
        return None
    return ModelNotFoundError(
        f"{text} does not exist", "pass the folder that holds the model's config.json, or a Hub id (org/name)"
    )


__all__ = ["HUB_ID", "exists", "hub_offline", "missing", "read_config"]
