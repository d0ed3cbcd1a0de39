"""Isolated environments, one per transformers version, for ``loadguard matrix``.

Each is a virtual environment created with ``uv`` under the user's cache dir and reused: ``transformers==X`` and
what it depends on, installed from the package index; torch (and every package the environment does not have)
comes from the environment loadguard runs in, through a ``.pth`` file, so torch (a multi-GB wheel, here the
2.13 CPU build) is shared, never downloaded again. loadguard itself is the running one (its source folder is on
the environment's path), so a cell runs this loadguard's scan under transformers X.

A version that cannot be installed here (a dependency with no wheel for this Python, say) gives an
:class:`Environment` with ``ok=False`` and the reason, never an exception.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidOptionError, LoadguardError

RECIPE_VERSION = 2


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
        return {"transformers": self.version, "ok": self.ok, "reason": self.reason or None, "created": self.created, "seconds": round(self.seconds, 2)}


def cache_root() -> Path:
    """``$LOADGUARD_CACHE``, else ``$XDG_CACHE_HOME/loadguard``, else ``~/.cache/loadguard``."""
    if os.environ.get("LOADGUARD_CACHE"):
        return Path(os.environ["LOADGUARD_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "loadguard"


def uv_binary() -> str:
    """The ``uv`` executable: the ``uv`` package's (``pip install 'loadguard[matrix]'``), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise LoadguardError("loadguard matrix creates its environments with uv, which is not installed here", "pip install 'loadguard[matrix]' (or pip install uv)")


def _shared_paths() -> list[str]:
    """What the environments borrow from this one: its site-packages (torch), and loadguard's own source root."""
    import loadguard

    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], str(Path(loadguard.__file__).resolve().parent.parent)]
    return list(dict.fromkeys(paths))


def _recipe(version: str) -> dict:
    import torch

    return {"recipe": RECIPE_VERSION, "transformers": version, "python": sys.version.split()[0], "torch": torch.__version__, "shared": _shared_paths()}


def _folder(version: str) -> Path:
    import torch

    tag = f"py{sys.version_info.major}{sys.version_info.minor}-torch{torch.__version__.replace('+', '-')}"
    return cache_root() / "envs" / tag / f"transformers-{version}"


def environment(version: str, *, rebuild: bool = False) -> Environment:
    """The environment for ``transformers==version``: reused from the cache, else created (under a lock)."""
    from filelock import FileLock

    folder = _folder(version)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        stamp = folder / ".loadguard-env.json"
        recipe = _recipe(version)
        if not rebuild and stamp.is_file():
            try:
                recorded = json.loads(stamp.read_text())
            except ValueError:
                recorded = {}
            if recorded.get("recipe_data") == recipe and (folder / "bin" / "python").exists():
                if recorded.get("ok"):
                    return Environment(version, folder, True)
                return Environment(version, folder, False, recorded.get("reason", "could not be installed"))
        return _create(version, folder, recipe, stamp)


def _create(version: str, folder: Path, recipe: dict, stamp: Path) -> Environment:
    start = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    uv = uv_binary()
    reason = ""
    steps = [
        [uv, "venv", str(folder), "--python", sys.executable, "--quiet"],
        # bytecode compiled at install: cells start without compiling transformers (PYTHONDONTWRITEBYTECODE may be set)
        [uv, "pip", "install", "--python", str(folder / "bin" / "python"), "--quiet", "--compile-bytecode", f"transformers=={version}"],
    ]
    for command in steps:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            reason = _last_line(result.stderr or result.stdout) or f"{command[1]} failed ({result.returncode})"
            break
    if not reason:
        site = subprocess.run(
            [str(folder / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
        ).stdout.strip()
        Path(site, "zz_loadguard_shared.pth").write_text("\n".join(recipe["shared"]) + "\n")
        probe = subprocess.run(
            [str(folder / "bin" / "python"), "-c", "import torch, transformers, loadguard; print(transformers.__version__)"],
            capture_output=True, text=True, timeout=300,
        )
        if probe.returncode != 0:
            reason = f"installed, but does not import: {_last_line(probe.stderr)}"
        elif probe.stdout.strip() != version:
            reason = f"the environment imports transformers {probe.stdout.strip()}, not {version}"
    seconds = time.perf_counter() - start
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"recipe_data": recipe, "ok": not reason, "reason": reason, "seconds": seconds}, indent=2))
    return Environment(version, folder, not reason, reason, created=True, seconds=seconds)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def released_versions(spec: str, max_versions: int | None = None) -> list[str]:
    """Released transformers versions the package index offers that match ``spec`` (``">=5,<5.25"``), oldest
    first; at most ``max_versions``, spread evenly from the oldest to the newest."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier:
        raise InvalidOptionError(f"{spec!r} is neither a version nor a version specifier", "e.g. 5.24.0 or '>=5,<5.25'") from None
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
    result = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True, text=True, timeout=120)
    for line in result.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise LoadguardError(
        f"the package index did not list transformers' versions ({_last_line(result.stderr) or 'no answer'})",
        "give exact versions (--transformers 4.57.6,5.24.0), or check that the package index is reachable",
    )
