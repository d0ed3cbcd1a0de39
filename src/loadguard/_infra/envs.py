"""Isolated environments, one per transformers version, for ``loadguard matrix``.

Each is a virtual environment created with ``uv`` under the user's cache dir and reused: ``transformers==X``, what
it depends on and loadguard's own requirements, installed from the package index; torch and what torch needs (and
nothing else) come from the environment loadguard runs in, through a folder of links on a ``.pth`` path, so torch
(a multi-GB wheel, here the 2.13 CPU build) is shared, never downloaded again, while this environment's optional
packages (kernels, torchao, ...) stay out of the other transformers' sight. loadguard itself is the running one
(its source folder is on the environment's path), so a cell runs this loadguard's scan under transformers X.

A version that cannot be installed here (a dependency with no wheel for this Python, say) gives an
:class:`Environment` with ``ok=False`` and the reason, never an exception.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import InvalidOptionError, LoadguardError
from . import procs
from .cache import cache_folder, cache_root
from .envcache import STAMP, keep_under_limit, read_stamp, touch
from .paths import inside, remove_tree, write_atomically

RECIPE_VERSION = 3


@dataclass(frozen=True)
class Environment:
    version: str
    folder: Path
    ok: bool
    reason: str = ""
    created: bool = False
    seconds: float = 0.0

    @property
    def python(self) -> Path:
        return self.folder / "bin" / "python"

    def to_dict(self) -> dict:
        return {
            "transformers": self.version,
            "ok": self.ok,
            "reason": self.reason or None,
            "created": self.created,
            "seconds": round(self.seconds, 2),
        }


def uv_binary() -> str:
    """The ``uv`` executable: the ``uv`` package's (``pip install 'loadguard[matrix]'``), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise LoadguardError(
        "loadguard matrix creates its environments with uv, which is not installed here",
        "pip install 'loadguard[matrix]' (or pip install uv)",
    )


def _closure(root: str) -> list:
    """The installed distributions ``root`` needs (itself included, extras left out), as importlib.metadata has them."""

    seen: dict[str, importlib.metadata.Distribution] = {}
    queue = [root]
    while queue:
        name = queue.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen[key] = distribution
        for text in distribution.requires or ():
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                queue.append(requirement.name)
    return [seen[k] for k in sorted(seen)]


def _torch_closure() -> list[str]:
    """``name==version`` of torch and what it needs: what the environments borrow from this one, and nothing else
    (an optional package of this environment, such as kernels, must not reach another transformers: transformers
    5.0 fails to import beside kernels 0.19)."""
    return [f"{d.metadata['Name']}=={d.version}" for d in _closure("torch")]


def _link_shared(target: Path) -> None:
    """A folder of links to the files of torch's closure (each distribution's top-level entries, metadata
    included), for an environment's ``.pth``: shared, never copied, and out of uv's reach."""
    target.mkdir(parents=True, exist_ok=True)
    for distribution in _closure("torch"):
        base = Path(distribution.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in distribution.files or () if Path(str(f)).parts}
        for top in sorted(tops):
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            link, source = target / top, base / top
            if source.exists() and not link.exists():
                link.symlink_to(source.resolve())


def _runtime_requirements() -> list[str]:
    """loadguard's own requirements but torch and transformers (uv installs them for the environment's transformers)."""

    out = []
    for text in importlib.metadata.requires("loadguard") or ():
        requirement = Requirement(text)
        if requirement.name.lower() in ("torch", "transformers") or (
            requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})
        ):
            continue
        out.append(str(requirement))
    return out


def _shared_paths(folder: Path) -> list[str]:
    """What an environment's ``.pth`` adds: the links to torch's closure, and loadguard's own source root."""
    return [str(folder / "shared-torch"), str(Path(__file__).resolve().parents[2])]


def _recipe(version: str) -> dict:
    import torch

    return {
        "recipe": RECIPE_VERSION,
        "transformers": version,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "shared": _torch_closure(),
        "source": _shared_paths(Path("."))[1],
        "requirements": _runtime_requirements(),
    }


def release(version: str) -> str:
    """``version`` as an exact PEP 440 release (what an environment is named after), or :class:`InvalidOptionError`:
    a version string never becomes a path unchecked."""

    try:
        parsed = Version(str(version).strip())
    except InvalidVersion:
        raise InvalidOptionError(
            f"{version!r} is not a transformers version", "e.g. 5.24.0, or a specifier such as '>=5,<5.25'"
        ) from None
    return str(parsed)


def _folder(version: str, recipe: dict) -> Path:
    """One folder per (Python, torch, transformers version, recipe): two checkouts or loadguard versions sharing a cache
    get folders of their own, so none rebuilds or deletes an environment another is using."""

    import torch

    tag = f"py{sys.version_info.major}{sys.version_info.minor}-torch{torch.__version__.replace('+', '-')}"
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    root = cache_root() / "envs"
    return inside(
        root, root / tag / f"transformers-{release(version)}-{digest}", f"the environment for transformers {version!r}"
    )


def environment(version: str, *, rebuild: bool = False) -> Environment:
    """The environment for ``transformers==version``: reused from the cache once it is seen to be whole (it holds that
    transformers and the torch it links), else created (under a lock per environment, built in a temporary folder
    and renamed into place only once it imports: a failed build leaves nothing a later run would trust). A moved or
    damaged environment is rebuilt once; the cache's size cap (``[tool.loadguard] cache-limit``) is kept afterwards."""

    version = release(version)
    recipe = _recipe(version)
    folder = _folder(version, recipe)
    cache_folder(*folder.parent.relative_to(cache_root()).parts)  # one line when the cache is not a writable folder
    with _held(folder, version):
        stamp = folder / STAMP
        recorded = {} if rebuild else read_stamp(stamp)
        damaged = ""
        if recorded.get("recipe_data") == recipe and recorded.get("ok"):
            damaged = _damaged(folder, version)
            if not damaged:
                touch(folder)
                return Environment(version, folder, True)
        made = _create(version, folder, recipe, stamp)
        if damaged and made.ok:
            made = Environment(
                version, folder, True, f"rebuilt: the cached one was {damaged}", made.created, made.seconds
            )
    if made.ok:
        keep_under_limit(keep=folder)
    return made


def _site_packages(folder: Path) -> Path | None:
    return next(iter(sorted(folder.glob("lib/python*/site-packages"))), None)


def _damaged(folder: Path, version: str) -> str:
    """What is wrong with a cached environment whose build once succeeded ("" when nothing): its Python, its
    transformers at the version its name says, the torch it links, and the paths of its ``.pth`` (a moved cache)."""
    python = folder / "bin" / "python"
    if not python.exists():
        return f"without its Python ({python})"
    site = _site_packages(folder)
    metadata = sorted(site.glob("transformers-*.dist-info/METADATA")) if site is not None else []
    versions = [
        line.split(":", 1)[1].strip()
        for file in metadata
        for line in file.read_text(errors="replace").splitlines()
        if line.startswith("Version:")
    ]
    if versions != [version]:
        return f"holding transformers {', '.join(versions) or 'none'}, not {version}"
    if not (folder / "shared-torch" / "torch" / "__init__.py").exists():
        return "without the torch it links (moved or removed)"
    pth = site / "zz_loadguard_shared.pth" if site is not None else None
    lines = pth.read_text().split() if pth is not None and pth.is_file() else []
    if not lines or not all(Path(line).exists() for line in lines):
        return "pointing at paths that are gone (the cache was moved)"
    return ""


@contextlib.contextmanager
def _held(folder: Path, version: str, patience: float = 5.0) -> Iterator[None]:
    """The environment's lock; a process that waits for it past ``patience`` seconds says for what, and for whom
    (another loadguard building the same environment), once, on stderr."""
    lock = FileLock(str(folder) + ".lock")
    owner = Path(str(folder) + ".lock.owner")
    try:
        lock.acquire(timeout=patience)
    except Timeout:
        holder = owner.read_text().strip() if owner.is_file() else "?"
        sys.stderr.write(
            f"loadguard: waiting for another loadguard process (pid {holder}) building the transformers {version} "
            f"environment in {folder}\n"
        )
        sys.stderr.flush()
        lock.acquire()
    try:
        with contextlib.suppress(OSError):
            owner.write_text(str(os.getpid()))
        yield
    finally:
        with contextlib.suppress(OSError):
            owner.unlink()
        lock.release()


def _create(version: str, folder: Path, recipe: dict, stamp: Path) -> Environment:
    """Build into a temporary folder beside ``folder`` and check that it imports there, then put it in place (under
    the environment's lock). A build that fails leaves nothing behind: no folder, no record, so the next run (online
    again, say) builds it afresh."""

    start = time.perf_counter()
    root = cache_root() / "envs"
    building = folder.parent / f".{folder.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    uv = uv_binary()
    reason = ""
    override = folder.parent / f"{folder.name}.override.txt"
    override.write_text("torch; python_version < '0'\n")  # what needs torch gets the shared one: never a download
    steps = [
        [uv, "venv", str(building), "--python", sys.executable, "--quiet", "--relocatable"],
        # bytecode compiled at install: cells start without compiling transformers (PYTHONDONTWRITEBYTECODE may be set)
        [
            uv,
            "pip",
            "install",
            "--python",
            str(building / "bin" / "python"),
            "--quiet",
            "--compile-bytecode",
            "--override",
            str(override),
            f"transformers=={version}",
            *recipe["requirements"],
        ],
    ]
    try:
        for command in steps:
            result = subprocess.run(command, capture_output=True, text=True, timeout=900, **procs.subprocess_options())
            if result.returncode != 0:
                reason = _last_line(result.stderr or result.stdout) or f"{command[1]} failed ({result.returncode})"
                break
        if not reason:
            site = subprocess.run(
                [str(building / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                **procs.subprocess_options(),
            ).stdout.strip()
            _link_shared(building / "shared-torch")
            # checked where it is built (its .pth names the building folder), then pointed at its final place
            Path(site, "zz_loadguard_shared.pth").write_text("\n".join(_shared_paths(building)) + "\n")
            reason = _imports(building, version)
            Path(site, "zz_loadguard_shared.pth").write_text("\n".join(_shared_paths(folder)) + "\n")
        if not reason:
            remove_tree(
                root, folder, "an environment folder"
            )  # a broken or rebuilt one of this recipe, under its lock
            building.rename(folder)
    finally:
        remove_tree(root, building, "an environment being built")
    seconds = time.perf_counter() - start
    if reason:
        with contextlib.suppress(OSError):
            stamp.unlink()
        remove_tree(root, folder, "an environment folder")  # nothing half-made stays to be trusted later
        return Environment(version, folder, False, reason, created=False, seconds=seconds)
    write_atomically(
        stamp, json.dumps({"recipe_data": recipe, "ok": True, "reason": "", "seconds": seconds}, indent=2)
    )
    touch(folder)
    return Environment(version, folder, True, "", created=True, seconds=seconds)


def _imports(folder: Path, version: str) -> str:
    """Why the environment in ``folder`` does not import torch, transformers and loadguard at ``version`` ("": it
    does)."""
    probe = subprocess.run(
        [
            str(folder / "bin" / "python"),
            "-c",
            "import torch, transformers, loadguard; from transformers import PreTrainedModel; print(transformers.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        **procs.subprocess_options(),
    )
    if probe.returncode != 0:
        return f"installed, but does not import: {_last_line(probe.stderr)}"
    if probe.stdout.strip() != version:
        return f"the environment imports transformers {probe.stdout.strip()}, not {version}"
    return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def released_versions(spec: str, max_versions: int | None = None) -> list[str]:
    """Released transformers versions the package index offers that match ``spec`` (``">=5,<5.25"``), oldest
    first; at most ``max_versions``, spread evenly from the oldest to the newest."""

    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier:
        raise InvalidOptionError(
            f"{spec!r} is neither a version nor a version specifier", "e.g. 5.24.0 or '>=5,<5.25'"
        ) from None
    offered = []
    for text in _index_versions():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not version.is_prerelease and version in wanted:
            offered.append(version)
    offered.sort()
    if max_versions and len(offered) > max_versions:
        if max_versions == 1:
            offered = [offered[-1]]
        else:
            step = (len(offered) - 1) / (max_versions - 1)
            offered = [offered[round(i * step)] for i in range(max_versions)]
    return [str(v) for v in offered]


def _index_versions() -> list[str]:
    """Every version of transformers the index lists (``pip index versions``: the index pip is configured with)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "transformers"],
        capture_output=True,
        text=True,
        timeout=120,
        **procs.subprocess_options(),
    )
    for line in result.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise LoadguardError(
        f"the package index did not list transformers' versions ({_last_line(result.stderr) or 'no answer'})",
        "give exact versions (--transformers 4.57.6,5.24.0), or check that the package index is reachable",
    )


class Worker:
    """``python -m loadguard.cli._cells`` in one environment: imports torch and transformers once, then runs each
    cell in a child forked for it alone (see :mod:`loadguard.cli._cells`)."""

    def __init__(self, environment: Environment):

        self.environment = environment
        self._stderr = tempfile.TemporaryFile("w+")
        # remote code is copied into transformers' modules cache by content hash: two environments loading the same
        # folder at once (--jobs) raced on one copy (FileNotFoundError on 5.8): each environment gets its own
        child_env = {**os.environ, "HF_MODULES_CACHE": str(environment.folder / "hf_modules")}
        self.process = subprocess.Popen(
            [str(environment.python), "-m", "loadguard.cli._cells"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=child_env,
            **procs.subprocess_options(),  # the worker (and the cells it forks) end with this process
        )
        ready = self.process.stdout.readline()
        self.versions = {"transformers": "", "torch": ""}
        if ready.strip():
            announced = json.loads(ready)
            self.versions = {"transformers": announced.get("ready", ""), "torch": announced.get("torch", "")}
        if not ready.strip():
            self._stderr.seek(0)
            lines = [line for line in self._stderr.read().splitlines() if line.strip()]
            raise RuntimeError(lines[-1] if lines else "the cell worker did not start")

    def run(self, arguments: list[str], limits: dict | None = None) -> dict:
        """One cell; ``limits``: ``{"timeout": seconds, "memory_limit": bytes}`` for the child that runs it."""
        self.process.stdin.write(json.dumps({"arguments": arguments, **(limits or {})}) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)
        self._stderr.close()
