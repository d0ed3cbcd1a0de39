"""``[tool.loadguard]`` in a project's pyproject.toml: the defaults a team sets once (formats, workarounds, limits, the
pytest plugin's mode, a baseline). Command-line flags override them; ``loadguard config`` prints what is in effect and
where each value came from. ``trust_remote_code`` is never read from it: running a model's code is asked for per run.

Example (pyproject.toml)::

    [tool.loadguard]
    format = "github"
    workarounds = ["auto"]
    baseline = "loadguard-baseline.json"
    timeout = 600
    memory-limit = "8GB"
    plugin = "fail"
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidOptionError
from .sizes import parse_size

# key -> (type, default, what it sets)
KEYS: dict[str, tuple[type, Any, str]] = {
    "format": (str, "table", "--format of audit, scan, compare, trace, matrix (where the command has that format)"),
    "workarounds": (
        list,
        [],
        "--workaround NAME... of every command that loads models, and of pytest tests whose marker names none "
        '("auto" or a list of names)',
    ),
    "baseline": (str, None, "--baseline FILE of audit and scan"),
    "timeout": (float, None, "--timeout of every command that runs model code (scan, matrix, fix: 900 s when unset)"),
    "memory-limit": (str, None, "--memory-limit of every command that runs model code"),
    "cache-limit": (
        str,
        None,
        "the most the environments of other transformers releases may take in loadguard's cache (least recently used "
        "removed first; `loadguard cache` lists and removes them)",
    ),
    "jobs": (int, 1, "--jobs of scan and matrix"),
    "color": (str, "auto", "--color: auto, always or never"),
    "plugin": (str, "off", "the pytest plugin's mode when --loadguard is not given: off, warn, fail or repair"),
    "poison": (
        bool,
        None,
        "the pytest plugin's loads under loadguard.poison(): true (also with plugin off), false; unset: every audited load",
    ),
}
MAX_JOBS = 256  # as --jobs takes
EXAMPLES = {
    "timeout": 600.0,
    "memory-limit": "8GB",
    "cache-limit": "10GB",
    "baseline": "loadguard-baseline.json",
    "workarounds": ["auto"],
}
CHOICES = {
    "color": ("auto", "always", "never"),
    "plugin": ("off", "warn", "fail", "repair"),
    "format": ("table", "human", "json", "markdown", "sarif", "github", "junit"),
}


@dataclass(frozen=True)
class Settings:
    """The values of ``[tool.loadguard]`` (only the keys it sets) and the file they came from (None: no such table)."""

    values: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def get(self, key: str) -> Any:
        return self.values.get(key, KEYS[key][1])

    def origin(self, key: str) -> str:
        return f"{self.source} [tool.loadguard]" if key in self.values else "default"


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib


def _read(path: Path) -> dict:
    """A pyproject.toml as a table; one that is not TOML but names loadguard is an error naming the file and line."""
    tomllib = _toml()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidOptionError(
            f"{path} cannot be read ({getattr(error, 'strerror', None) or type(error).__name__})",
            "fix the file, or run from a directory without it",
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        if "loadguard" not in text:  # not ours to judge: a broken file that sets nothing for loadguard
            return {}
        raise InvalidOptionError(
            f"{path} is not valid TOML ({error}), so its [tool.loadguard] table cannot be read",
            "fix the file at that line, or remove the table",
        ) from None


def find(start: str | Path | None = None) -> Path | None:
    """The nearest pyproject.toml, from ``start`` (the current directory) up, that has a ``[tool.loadguard]`` table
    (or is not TOML and names loadguard: :func:`load` says what is wrong with it)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                tool = _read(candidate).get("tool", {})
            except InvalidOptionError:
                return candidate
            if isinstance(tool, dict) and "loadguard" in tool:
                return candidate
    return None


def _check(key: str, value: Any) -> str | None:
    """What is wrong with ``key = value``, in the table's own words; None when it is right."""
    kind, default, _ = KEYS[key]
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "is not a number of seconds"
        if not math.isfinite(value) or value < 1:
            return "must be a finite number of seconds, at least 1"
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return "is not a whole number"
        if not 1 <= value <= MAX_JOBS:
            return f"must be between 1 and {MAX_JOBS}"
    elif kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "is not a list of strings"
    elif not isinstance(value, kind):
        return f"is not a {'string' if kind is str else 'true/false' if kind is bool else kind.__name__}"
    if key == "memory-limit" and str(value).strip().lower() not in ("auto", "none") and parse_size(str(value)) is None:
        return 'is not a size (e.g. "8GB", "2G", "2GiB", "2048M", "auto", "none")'
    if key == "cache-limit" and str(value).strip().lower() != "none" and parse_size(str(value)) is None:
        return 'is not a size (e.g. "10GB", "none")'
    if key == "baseline" and not value.strip():
        return "is empty (a file name)"
    if key in CHOICES and value not in CHOICES[key]:
        return f"is not one of {', '.join(CHOICES[key])}"
    return None


def load(start: str | Path | None = None) -> Settings:
    """The ``[tool.loadguard]`` table nearest ``start``, checked key by key: an unknown key, a wrong type or a value out
    of range is one clear error naming the file, the key and what it takes."""
    path = find(start)
    if path is None:
        return Settings()
    tool = _read(path).get("tool")
    table = tool.get("loadguard") if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        raise InvalidOptionError(
            f"{path}: tool.loadguard is a {type(table).__name__}, not a table",
            "write it as a [tool.loadguard] table of settings",
        )
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise InvalidOptionError(
                f"{path} [tool.loadguard]: unknown key {key!r}",
                f"known keys: {', '.join(KEYS)} (`loadguard config` lists them)",
            )
        if KEYS[key][0] is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if key in ("memory-limit", "cache-limit") and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if key == "workarounds" and isinstance(value, str):  # workarounds = "auto" means ["auto"], as everywhere
            value = [value]
        wrong = _check(key, value)
        if wrong:
            example = KEYS[key][1] if KEYS[key][1] not in (None, []) else EXAMPLES.get(key)
            raise InvalidOptionError(
                f"{path} [tool.loadguard]: {key} = {value!r} {wrong}",
                f"e.g. {key} = {example!r}" if example is not None else "see `loadguard config`",
            )
        values[key] = value
    return Settings(values, path)


# what each key is called among a command's click parameters
PARAMETERS = {
    "format": "fmt",
    "workarounds": "workarounds",
    "baseline": "baseline_file",
    "timeout": "timeout",
    "memory-limit": "memory",
    "jobs": "jobs",
}


def default_map(
    settings: Settings, commands: dict[str, set[str]], formats: dict[str, tuple[str, ...]]
) -> dict[str, dict[str, Any]]:
    """click's ``default_map``: for each command (name -> its parameter names), the values the table sets for it; a
    format the command does not have is left to its own default."""
    out: dict[str, dict[str, Any]] = {}
    for name, parameters in commands.items():
        defaults = {}
        for key, value in settings.values.items():
            parameter = PARAMETERS.get(key)
            if parameter not in parameters:
                continue
            if key == "format" and value not in formats.get(name, ()):
                continue
            defaults[parameter] = tuple(value) if key == "workarounds" else value
        if defaults:
            out[name] = defaults
    return out


__all__ = ["KEYS", "Settings", "default_map", "find", "load"]
