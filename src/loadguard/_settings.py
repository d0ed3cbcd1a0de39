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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidOptionError

# key -> (type, default, what it sets)
KEYS: dict[str, tuple[type, Any, str]] = {
    "format": (str, "table", "--format of audit, scan, compare, trace, matrix (where the command has that format)"),
    "workarounds": (list, [], "--workaround NAME... of every command that loads models"),
    "baseline": (str, None, "--baseline FILE of audit and scan"),
    "timeout": (float, None, "--timeout of every command that runs model code (scan, matrix: 900 s when unset)"),
    "memory-limit": (str, None, "--memory-limit of every command that runs model code"),
    "jobs": (int, 1, "--jobs of scan and matrix"),
    "color": (str, "auto", "--color: auto, always or never"),
    "plugin": (str, "off", "the pytest plugin's mode when --loadguard is not given: off, warn, fail or repair"),
    "poison": (bool, False, "the pytest plugin loads under loadguard.poison() (as --loadguard-poison)"),
}
CHOICES = {"color": ("auto", "always", "never"), "plugin": ("off", "warn", "fail", "repair"),
           "format": ("table", "human", "json", "markdown", "sarif", "github", "junit")}


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


def find(start: str | Path | None = None) -> Path | None:
    """The nearest pyproject.toml, from ``start`` (the current directory) up, that has a ``[tool.loadguard]`` table."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                if "loadguard" in _toml().loads(candidate.read_text()).get("tool", {}):
                    return candidate
            except (OSError, ValueError):
                continue
    return None


def load(start: str | Path | None = None) -> Settings:
    """The ``[tool.loadguard]`` table nearest ``start``, checked: an unknown key or a wrong type is one clear error."""
    path = find(start)
    if path is None:
        return Settings()
    table = _toml().loads(path.read_text())["tool"]["loadguard"]
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise InvalidOptionError(f"{path} [tool.loadguard]: unknown key {key!r}", f"known keys: {', '.join(KEYS)} (`loadguard config` lists them)")
        kind = KEYS[key][0]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if kind is str and key == "memory-limit" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)) or (kind is list and not all(isinstance(v, str) for v in value)):
            raise InvalidOptionError(f"{path} [tool.loadguard]: {key} = {value!r} is not a {kind.__name__}{' of strings' if kind is list else ''}",
                                     f"e.g. {key} = {KEYS[key][1]!r}" if KEYS[key][1] not in (None, []) else "see `loadguard config`")
        if key in CHOICES and value not in CHOICES[key]:
            raise InvalidOptionError(f"{path} [tool.loadguard]: {key} = {value!r} is not one of {', '.join(CHOICES[key])}", "pick one of them")
        values[key] = value
    return Settings(values, path)


# what each key is called among a command's click parameters
PARAMETERS = {"format": "fmt", "workarounds": "workarounds", "baseline": "baseline_file", "timeout": "timeout", "memory-limit": "memory", "jobs": "jobs"}


def default_map(settings: Settings, commands: dict[str, set[str]], formats: dict[str, tuple[str, ...]]) -> dict[str, dict[str, Any]]:
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
