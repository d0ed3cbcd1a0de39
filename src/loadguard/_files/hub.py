"""A scan's way to the Hugging Face Hub, through the real huggingface_hub client and ``HF_ENDPOINT``: config and code
by ``snapshot_download`` (``*.json``/``*.py``), the safetensors headers by two HTTP range reads per file (the length,
then the header: never a weight byte), each kept in loadguard's cache by commit, so a second scan of the same revision
fetches no file content. Counts the bytes it fetched; tells apart what the Hub answered (no such model or revision,
private, gated) from what it could not (unreachable, offline); retries what is worth retrying (429, 5xx, a dropped or
stalled connection) a bounded number of times with backoff.

A token (``HF_TOKEN``, ``hf auth login``) is sent only to the configured endpoint: a redirect to another host (the
Hub's CDN) is followed without it. No message, row or file loadguard writes holds it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

from huggingface_hub import constants, hf_hub_url, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import build_hf_headers, get_session

from .._infra import cache_folder, inside, write_atomically
from ..errors import HubAccessError, HubUnreachableError, LoadguardError, ModelNotFoundError, chain_of
from .checkpoint import shard_names
from .preflight import HUB_ID

ATTEMPTS = 4
"""Tries of one Hub call that failed in a way worth retrying (429, 5xx, a dropped or stalled connection)."""
READ_TIMEOUT = float(os.environ.get("LOADGUARD_HUB_READ_TIMEOUT", "10"))
"""Seconds a header read may wait for the next bytes before it is retried (``LOADGUARD_HUB_READ_TIMEOUT``)."""
_RETRY_STATUS = {429, 500, 502, 503, 504}


def split_id(text: str) -> tuple[str, str | None]:
    """``org/name@revision`` -> ``("org/name", "revision")``; a plain id -> ``(id, None)``."""
    if "@" in text:
        name, _, revision = text.rpartition("@")
        if HUB_ID.match(name) and revision:
            return name, revision
    return text, None


def is_hub_id(text: str) -> bool:
    return bool(HUB_ID.match(split_id(text)[0]))


@dataclass
class Fetched:
    """What one scan took from the Hub: the bytes of file content (config, code, headers) and the commit it resolved."""

    bytes: int = 0
    commit: str | None = None


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _retryable(error: BaseException) -> bool:

    chain = chain_of(error)
    if any(isinstance(e, (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError)) for e in chain):
        return False
    statuses = [s for s in map(_status, chain) if s is not None]
    if statuses:
        return statuses[0] in _RETRY_STATUS
    names = " ".join(type(e).__name__.lower() for e in chain)
    return any(word in names for word in ("timeout", "connect", "readerror", "remoteprotocol", "network"))


def _wait(error: BaseException, attempt: int) -> float:
    response = getattr(error, "response", None)
    after = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        return min(30.0, float(after)) if after else min(8.0, 0.5 * 2**attempt)
    except ValueError:
        return min(8.0, 0.5 * 2**attempt)


def retried(call, attempts: int = ATTEMPTS):
    """``call()``, again after a 429 (its ``Retry-After``), a 5xx or a dropped connection, ``attempts`` times in all."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as error:
            if attempt + 1 == attempts or not _retryable(error):
                raise
            time.sleep(_wait(error, attempt))
    raise AssertionError("unreachable")


def local_snapshot(text: str) -> Path | None:
    """The HF cache's snapshot folder of a Hub id (``org/name[@rev]``) a load fetched, None for a local path or an
    id the cache does not hold: what an audit reads the checkpoint from."""
    if os.path.exists(text) or not is_hub_id(text):
        return None

    name, revision = split_id(text)
    found = try_to_load_from_cache(name, "config.json", revision=revision)
    return Path(found).parent if isinstance(found, str) else None


def _cache_blobs(repo_id: str) -> Path:

    return Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "blobs"


def _blob_bytes(repo_id: str) -> int:
    blobs = _cache_blobs(repo_id)
    return sum(p.stat().st_size for p in blobs.iterdir() if p.is_file()) if blobs.is_dir() else 0


def snapshot(repo_id: str, revision: str | None, patterns: list[str], offline: bool, fetched: Fetched) -> Path:
    """The repository's files matching ``patterns`` at ``revision`` in the standard HF cache (fetched once; offline:
    the cache only). ``fetched`` gets the bytes this call added to the cache and the commit."""

    before = _blob_bytes(repo_id)
    try:
        folder = Path(
            retried(
                lambda: snapshot_download(
                    repo_id, revision=revision, allow_patterns=patterns, local_files_only=offline
                )
            )
        )
    except Exception as error:
        raise failure(repo_id, error, offline, revision) from None
    fetched.bytes += max(0, _blob_bytes(repo_id) - before)
    fetched.commit = folder.name
    return folder


def _headers_cache(repo_id: str, commit: str) -> Path:

    return cache_folder("hub-headers") / repo_id.replace("/", "--") / commit


def _range(url: str, start: int, end: int, fetched: Fetched) -> bytes:
    """Bytes ``start..end`` of the file at ``url``: the token goes to the configured endpoint only; a redirect to
    another host (the CDN) is followed without it."""

    endpoint = urlparse(constants.ENDPOINT).netloc
    headers = build_hf_headers()
    headers["Range"] = f"bytes={start}-{end}"
    for _ in range(5):  # redirects, followed by hand
        if urlparse(url).netloc != endpoint:
            headers.pop("authorization", None)
            headers.pop("Authorization", None)
        session = get_session()
        manual = (
            {"follow_redirects": False} if "httpx" in type(session).__module__ else {"allow_redirects": False}
        )  # hub 1.x / 0.x
        response = session.get(url, headers=headers, timeout=READ_TIMEOUT, **manual)
        if response.status_code in (301, 302, 303, 307, 308):
            url = urljoin(url, response.headers["Location"])
            continue
        response.raise_for_status()
        body = response.content
        fetched.bytes += len(body)
        return body[: end - start + 1]
    raise ConnectionError(f"too many redirects for {url}")


def safetensors_header(repo_id: str, commit: str, filename: str, fetched: Fetched) -> dict:
    """One file's safetensors header (its JSON), by two range reads; kept by commit in loadguard's cache."""

    root = _headers_cache(repo_id, commit)
    kept = inside(root, root / f"{filename}.json", "a safetensors header's cache file")
    if kept.is_file():
        return json.loads(kept.read_text())
    url = hf_hub_url(repo_id, filename, revision=commit)
    raw = retried(lambda: _range(url, 0, 7, fetched))
    length = int.from_bytes(raw[:8], "little")
    if len(raw) < 8 or length > 100 * 2**20:
        raise ValueError(f"{filename}: its first 8 bytes are not the length of a safetensors header")
    header = json.loads(retried(lambda: _range(url, 8, 8 + length - 1, fetched)))
    kept.parent.mkdir(parents=True, exist_ok=True)

    write_atomically(kept, json.dumps(header))
    return header


def weight_files(folder: Path) -> list[str] | None:
    """The safetensors files a snapshot's index names (or the single file, when the repository lists one)."""

    index = folder / "model.safetensors.index.json"
    return (
        sorted(shard_names(index)) if index.is_file() else None
    )  # plain file names only: each names a cache file below


def headers(repo_id: str, commit: str, folder: Path, fetched: Fetched) -> dict[str, dict] | None:
    """``{file: header}`` for the checkpoint's safetensors files (the index's shards, else ``model.safetensors``), None
    when the repository has none."""
    files = weight_files(folder) or ["model.safetensors"]
    try:
        return {name: safetensors_header(repo_id, commit, name, fetched) for name in files}
    except LoadguardError:  # refused before anything went over the wire: its own words
        raise
    except Exception as error:
        if files == ["model.safetensors"] and _status(error) == 404:
            return None  # no safetensors checkpoint: the caller says what it assumes instead
        raise failure(repo_id, error, False, commit) from None


_UNREACHABLE = (
    "connecterror",
    "connectionerror",
    "name or service not known",
    "couldn't connect",
    "could not connect",
    "outgoing traffic has been disabled",
    "temporary failure in name resolution",
    "timed out",
    "timeout",
    "network is unreachable",
    "offline mode",
    "connection refused",
    "readerror",
    "remoteprotocolerror",
)


def failure(repo_id: Any, error: BaseException, offline: bool, revision: str | None = None) -> LoadguardError:
    """A Hub id that could not be fetched, in one line that says which of these it is: offline or unreachable (nothing
    cached), gated or private (``HF_TOKEN``), no such repository, no such revision, or the Hub failing (5xx, 429)."""

    chain = chain_of(error)
    text = " | ".join(f"{type(e).__name__}: {e}".lower() for e in chain)
    login = "log in (hf auth login) or set HF_TOKEN to a token that can read it"
    if any(isinstance(e, GatedRepoError) or _status(e) == 403 for e in chain):
        return HubAccessError(
            f"{repo_id} is gated on the Hub: your token has no access (403)",
            f"ask for access on its Hub page, then {login}",
        )
    if any(isinstance(e, RevisionNotFoundError) for e in chain):
        return ModelNotFoundError(
            f"{repo_id} has no revision {revision!r} on the Hub (404)",
            "check the branch, tag or commit after @ (or --revision)",
        )
    if any(isinstance(e, RepositoryNotFoundError) or _status(e) in (401, 404) for e in chain):
        status = next((_status(e) for e in chain if _status(e) in (401, 404)), None)
        if status == 401:
            return HubAccessError(
                f"{repo_id}: no such model on the Hub, or a private one this request may not see (401)",
                f"check the id; for a private model, {login}",
            )
        return ModelNotFoundError(f"{repo_id}: no such model on the Hugging Face Hub (404)", "check the id (org/name)")
    if not offline and (
        any(type(e).__name__.lower() == "readtimeout" for e in chain) or "read timed out" in text
    ):  # httpx / requests
        return HubUnreachableError(
            f"{repo_id}: the Hub stopped sending mid-transfer (no bytes for {READ_TIMEOUT:g} s, {ATTEMPTS} tries)",
            "try again later; a mirror can be set with HF_ENDPOINT",
        )
    if offline or any(marker in text for marker in _UNREACHABLE):
        where = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub cannot be reached from here"
        return HubUnreachableError(
            f"{repo_id}: offline ({where}) and not in the local cache",
            "unset HF_HUB_OFFLINE to fetch it"
            if offline
            else "connect to the Hub (or set HF_ENDPOINT to a mirror), download the model where you can, or pass a local folder",
        )
    status = next((_status(e) for e in chain if _status(e)), None)
    if status is not None and status >= 429:
        return HubUnreachableError(
            f"{repo_id}: the Hub answered {status} {ATTEMPTS} times",
            "try again later; a mirror can be set with HF_ENDPOINT",
        )
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ModelNotFoundError(
        f"{repo_id}: could not be fetched from the Hub ({first})", "run again with LOADGUARD_DEBUG=1 to see why"
    )


__all__ = [
    "Fetched",
    "failure",
    "local_snapshot",
    "headers",
    "is_hub_id",
    "retried",
    "safetensors_header",
    "snapshot",
    "split_id",
]
