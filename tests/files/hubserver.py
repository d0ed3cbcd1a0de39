"""A Hugging Face Hub endpoint for the test suite: a small HTTP server on a free local port that answers the requests
the real huggingface_hub client makes (``HF_ENDPOINT=http://127.0.0.1:PORT``), serving repositories from local
folders, and counting what it sends. No function of huggingface_hub is replaced: tests run loadguard against it
as against huggingface.co.

What it answers, as the Hub does:

- ``GET /api/models/ORG/NAME[/revision/REV]``: the model info (``sha``, ``siblings``, ``private``, ``gated``);
- ``GET /api/models/ORG/NAME/tree/REV[/PATH]``: the file listing (``oid``, ``size``, ``lfs`` for weights);
- ``HEAD``/``GET /ORG/NAME/resolve/REV/FILE``: ``X-Repo-Commit``, ``ETag``; a weight file (``*.safetensors``,
  ``*.bin``) is a redirect to ``/cdn/...`` with ``X-Linked-Etag`` and ``X-Linked-Size``, as LFS files are; byte
  ranges (``Range: bytes=A-B``) answered with 206;
- a private repository without the right token: 401 ``X-Error-Code: RepoNotFound``; a gated one: 403
  ``X-Error-Code: GatedRepo``; an unknown repository: 401/404 ``RepoNotFound``; an unknown revision: 404
  ``RevisionNotFound``; an unknown file: 404 ``EntryNotFound``.

Faults a test can script: ``fail[path] = [429, 503, ...]`` answered first (429 with ``Retry-After``), ``stall``
(paths whose body stops after a few bytes and never ends).

Weights may be real-size sparse files (:func:`sparse_safetensors`): a header and a hole, so a 70B-shaped checkpoint
takes no disk.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")


@dataclass
class Repo:
    """A repository: its files (name -> local path) at each commit, and its branches and tags (name -> commit)."""

    commits: dict[str, dict[str, Path]]
    refs: dict[str, str]
    private: bool = False
    gated: bool = False

    @classmethod
    def from_folder(cls, folder: Path, private: bool = False, gated: bool = False) -> Repo:
        files = {
            p.relative_to(folder).as_posix(): p
            for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }
        sha = hashlib.sha1(
            "\n".join(f"{k}:{v.stat().st_size}" for k, v in files.items()).encode() + folder.name.encode()
        ).hexdigest()
        return cls({sha: files}, {"main": sha}, private, gated)

    def add_commit(self, folder: Path, ref: str | None = None) -> str:
        files = {
            p.relative_to(folder).as_posix(): p
            for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }
        sha = hashlib.sha1(
            ("\n".join(f"{k}:{v.stat().st_size}" for k, v in files.items()) + str(len(self.commits))).encode()
        ).hexdigest()
        self.commits[sha] = files
        if ref:
            self.refs[ref] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        revision = unquote(revision)
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


def _oid(path: Path) -> str:
    """A stable id for a file without reading a real-size weight file through (a synthetic sha256)."""
    stat = path.stat()
    if path.suffix in WEIGHTS:
        return hashlib.sha256(f"{path}:{stat.st_size}".encode()).hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Traffic:
    """What the server sent: requests and body bytes per (repo, file), and every request line with its token."""

    requests: Counter = field(default_factory=Counter)
    body_bytes: Counter = field(default_factory=Counter)
    lines: list = field(default_factory=list)
    authorizations: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def file_bytes(self, suffix: str = "") -> int:
        """Body bytes of file content sent (resolve and cdn), optionally of files ending with ``suffix``."""
        return sum(n for (kind, name), n in self.body_bytes.items() if kind == "file" and name.endswith(suffix))

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.body_bytes.clear()
            self.lines.clear()
            self.authorizations.clear()


class HubServer:
    """``with HubServer({"org/name": Repo.from_folder(path)}, token="hf_x") as hub:`` then ``HF_ENDPOINT=hub.url``."""

    def __init__(self, repos: dict[str, Repo], token: str | None = None):
        self.repos = repos
        self.token = token
        self.traffic = Traffic()
        self.fail: dict[str, list[int]] = defaultdict(
            list
        )  # a path (resolve file name or api route) -> statuses to answer first
        self.stall: set[str] = set()  # file names whose body stalls
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HubServer:
        hub = self

        class Handler(_Handler):
            server_hub = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes = b"", headers: dict | None = None, count: tuple[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
            if count:
                with self.server_hub.traffic.lock:
                    self.server_hub.traffic.body_bytes[count] += len(body)

    def _json(self, status: int, document, headers: dict | None = None) -> None:
        self._send(status, json.dumps(document).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str, message: str) -> None:
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def _authorized(self, name: str, repo: Repo) -> bool:
        """Whether this request may see ``repo``; answers the refusal itself when not."""
        given = self.headers.get("Authorization", "")
        good = self.server_hub.token is not None and given == f"Bearer {self.server_hub.token}"
        if repo.private and not good:
            self._error(
                401,
                "RepoNotFound",
                f"Repository Not Found for url: {self.path}. Please make sure you specified the correct `repo_id` "
                "and `repo_type`. If you are trying to access a private or gated repo, make sure you are authenticated.",
            )
            return False
        if repo.gated and not good:
            self._error(
                403,
                "GatedRepo",
                f"Access to model {name} is restricted. You must have access to it and be authenticated to access it.",
            )
            return False
        return True

    def _scripted(self, key: str) -> bool:
        """A fault the test scripted for ``key``: answered (and True) while there is one."""
        queue = self.server_hub.fail.get(key)
        if not queue:
            return False
        status = queue.pop(0)
        headers = {"Retry-After": "1"} if status == 429 else {}
        self._send(status, b"scripted failure", headers)
        return True

    def _record(self, kind: str, name: str) -> None:
        traffic = self.server_hub.traffic
        with traffic.lock:
            traffic.requests[(kind, name)] += 1
            traffic.lines.append(f"{self.command} {self.path}")
            traffic.authorizations.append(self.headers.get("Authorization"))

    # -- routes -----------------------------------------------------------------------------------------------------

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = urlparse(self.path).path
        if path.startswith("/cdn/"):
            return self._cdn(path)
        api = re.match(r"^/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(?:/(.*))?)?$", path)
        if api:
            return self._api(unquote(api.group(1)), api.group(2), api.group(3) or "main", api.group(4) or "")
        resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if resolve:
            return self._resolve(unquote(resolve.group(1)), unquote(resolve.group(2)), unquote(resolve.group(3)))
        self._error(404, "NotFound", f"no route {path}")

    def _repo(self, name: str) -> Repo | None:
        repo = self.server_hub.repos.get(name)
        if repo is None:
            self._error(
                401 if "Authorization" not in self.headers else 404,
                "RepoNotFound",
                f"Repository Not Found for url: {self.path}.",
            )
        return repo

    def _commit(self, name: str, revision: str) -> tuple[Repo, str] | None:
        """The repository and the commit ``revision`` names, when this request may see them; the refusal answered
        otherwise."""
        repo = self._repo(name)
        if repo is None or not self._authorized(name, repo):
            return None
        sha = repo.resolve(revision)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo, sha

    def _api(self, name: str, kind: str | None, revision: str, sub: str) -> None:
        self._record("api", name)
        if self._scripted(f"api:{name}"):
            return
        found = self._commit(name, revision)
        if found is None:
            return
        repo, sha = found
        files = repo.commits[sha]
        if kind == "tree":
            prefix = sub.rstrip("/") + "/" if sub else ""
            entries = []
            for rel, local in files.items():
                if not rel.startswith(prefix):
                    continue
                size = local.stat().st_size
                entry = {
                    "type": "file",
                    "oid": hashlib.sha1(rel.encode() + sha.encode()).hexdigest(),
                    "size": size,
                    "path": rel,
                }
                if local.suffix in WEIGHTS:
                    entry["lfs"] = {"oid": _oid(local), "size": size, "pointerSize": 134}
                entries.append(entry)
            self._json(200, entries)
            return
        self._json(
            200,
            {
                "id": name,
                "modelId": name,
                "sha": sha,
                "private": repo.private,
                "gated": "auto" if repo.gated else False,
                "siblings": [{"rfilename": rel} for rel in files],
                "tags": [],
                "lastModified": "2026-12-01T00:00:00.000Z",
            },
        )

    def _resolve(self, name: str, revision: str, file: str) -> None:
        self._record("resolve", f"{name}/{file}")
        if self._scripted(file):
            return
        found = self._commit(name, revision)
        if found is None:
            return
        repo, sha = found
        local = repo.commits[sha].get(file)
        if local is None:
            self._error(404, "EntryNotFound", f"{file} does not exist at {revision}")
            return
        common = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
        if local.suffix in WEIGHTS:  # an LFS file: a redirect to where its bytes are, as the Hub answers
            oid = _oid(local)
            # another host, as the Hub's CDN is: a client must not send it the token
            location = (
                f"{self.server_hub.url.replace('127.0.0.1', 'localhost')}/cdn/{oid}?repo={name}&file={file}&sha={sha}"
            )
            self._send(
                302,
                b"",
                {
                    **common,
                    "Location": location,
                    "X-Linked-Etag": f'"{oid}"',
                    "X-Linked-Size": local.stat().st_size,
                    "ETag": f'"{oid}"',
                },
            )
            return
        self._content(local, file, {**common, "ETag": f'"{hashlib.sha1(local.read_bytes()).hexdigest()}"'})

    def _cdn(self, path: str) -> None:
        query = dict(part.split("=", 1) for part in urlparse(self.path).query.split("&") if "=" in part)
        name, file, sha = unquote(query.get("repo", "")), unquote(query.get("file", "")), query.get("sha", "")
        self._record("cdn", f"{name}/{file}")
        repo = self.server_hub.repos.get(name)
        local = repo.commits.get(sha, {}).get(file) if repo else None
        if local is None:
            self._error(404, "EntryNotFound", "no such object")
            return
        self._content(
            local,
            file,
            {
                "ETag": f'"{_oid(local)}"',
                "Accept-Ranges": "bytes",
                "Content-Disposition": f'attachment; filename="{Path(file).name}"',
            },
        )

    def _content(self, local: Path, file: str, headers: dict) -> None:
        size = local.stat().st_size
        start, end, status = 0, size - 1, 200
        wanted = re.match(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if wanted:
            if wanted.group(1):
                start = int(wanted.group(1))
                end = min(int(wanted.group(2)), size - 1) if wanted.group(2) else size - 1
            else:  # a suffix: the last N bytes
                start, end = max(0, size - int(wanted.group(2))), size - 1
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
        length = max(0, end - start + 1)
        self.send_response(status)
        for key, value in {**headers, "Content-Length": length}.items():
            self.send_header(key, str(value))
        self.end_headers()
        if self.command == "HEAD":
            return
        traffic = self.server_hub.traffic
        with open(local, "rb") as stream:
            stream.seek(start)
            left = length
            while left:
                chunk = stream.read(min(left, 1 << 20))
                if not chunk:
                    break
                if file in self.server_hub.stall:  # a few bytes, then nothing, ever
                    self.wfile.write(chunk[:16])
                    self.wfile.flush()
                    time.sleep(3600)
                self.wfile.write(chunk)
                left -= len(chunk)
                with traffic.lock:
                    traffic.body_bytes[("file", file)] += len(chunk)


def sparse_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> int:
    """A safetensors file of full size whose data is a hole (no disk used): a real header for ``tensors`` (name ->
    (dtype, shape)). Returns the size of its data."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + count * sizes[dtype]]}
        offset += count * sizes[dtype]
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as stream:
        stream.write(struct.pack("<Q", len(raw)) + raw)
        stream.truncate(8 + len(raw) + offset)
    return offset


def seventy_b_shaped(folder: Path) -> int:
    """A Llama-3-70B-shaped repository: its config, index and 30 real-size sparse shards. Returns the weights' size."""
    folder.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(config))
    h, i, kv = 8192, 28672, 1024
    tensors = {
        "model.embed_tokens.weight": ("BF16", (128256, h)),
        "model.norm.weight": ("BF16", (h,)),
        "lm_head.weight": ("BF16", (128256, h)),
    }
    for layer in range(80):
        p = f"model.layers.{layer}."
        tensors.update(
            {
                p + "self_attn.q_proj.weight": ("BF16", (h, h)),
                p + "self_attn.k_proj.weight": ("BF16", (kv, h)),
                p + "self_attn.v_proj.weight": ("BF16", (kv, h)),
                p + "self_attn.o_proj.weight": ("BF16", (h, h)),
                p + "mlp.gate_proj.weight": ("BF16", (i, h)),
                p + "mlp.up_proj.weight": ("BF16", (i, h)),
                p + "mlp.down_proj.weight": ("BF16", (h, i)),
                p + "input_layernorm.weight": ("BF16", (h,)),
                p + "post_attention_layernorm.weight": ("BF16", (h,)),
            }
        )
    names = list(tensors)
    shards = [names[k::30] for k in range(30)]
    weight_map, total = {}, 0
    for index, shard in enumerate(shards):
        file = f"model-{index + 1:05d}-of-00030.safetensors"
        total += sparse_safetensors(folder / file, {n: tensors[n] for n in shard})
        weight_map.update({n: file for n in shard})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    return total


__all__ = ["HubServer", "Repo", "seventy_b_shaped", "sparse_safetensors"]
