"""``v4-config-use-cache``: transformers 4 kept every key of config.json on the config, ``use_cache`` among them;
transformers 5 takes ``use_cache`` off a config class that does not set it itself (it is a generation setting there).
v4 code that reads ``self.config.use_cache`` (``use_cache = use_cache if use_cache is not None else
self.config.use_cache``, in the forward of most 2023 remote code) raises ``AttributeError`` once ``generate`` calls it
without the argument (ChatGLM2's ``prepare_inputs_for_generation`` never passes it).

The source fix: the config class's ``__init__`` ends by keeping ``use_cache`` where it was given and this transformers
dropped it; on 4.x the attribute is already there, so nothing changes.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from ._registry import Usage, workaround
from .remote_code import has_remote_code
from .v4_api import on_new_subclasses

KEPT = (
    'if "use_cache" in {kwargs} and not hasattr(self, "use_cache"):'
    "  # transformers 5 drops it; 4.x kept config.json's use_cache\n"
    '    self.use_cache = {kwargs}["use_cache"]\n'
)
_SETS_ITSELF = re.compile(r"self\.use_cache\s*=")


def _use_cache_native() -> bool:
    from transformers import PretrainedConfig

    return hasattr(PretrainedConfig(use_cache=True), "use_cache")


def _keep_use_cache(sources: dict[str, str], config: dict) -> dict[str, str]:
    """Each config class of the configuration files whose ``__init__`` takes ``**kwargs`` and does not set
    ``use_cache`` itself ends by keeping it (none where config.json has no ``use_cache``: 4.x had no attribute either)."""
    import libcst as cst

    from .._codemod import append_to_init

    if "use_cache" not in config:
        return {}
    edited = {}
    for file, text in sources.items():
        if not file.endswith(".py") or "config" not in file.rsplit("/", 1)[-1]:
            continue
        new = text
        for node in cst.parse_module(text).body:
            if not isinstance(node, cst.ClassDef):
                continue
            init = next(
                (s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None
            )
            star = init.params.star_kwarg if init is not None else None
            if star is None or _SETS_ITSELF.search(cst.Module(body=[init]).code):
                continue
            new = append_to_init(new, node.name.value, KEPT.format(kwargs=star.name.value))
        if new != text:
            edited[file] = new
    return edited


@workaround(
    "v4-config-use-cache",
    applies_to=has_remote_code,
    stage="before_import",
    reason="remote code that reads config.use_cache (ChatGLM2's forward, when generate does not pass use_cache): "
    "transformers 5 takes use_cache off a config class that does not set it itself; kept as config.json gave it, "
    "as transformers 4 kept it",
    upstream="the model's repository (read use_cache from the argument, or set self.use_cache in the config class)",
    fixes=[("AttributeError", r"'\w*Config' object has no attribute 'use_cache'")],
    native=_use_cache_native,
    touches=r"\bconfig\.use_cache\b",
    source_fix=lambda sources, config, model: (
        _keep_use_cache(sources, config),
        "its config class keeps use_cache as config.json gives it (transformers 5 drops it; 4.x kept it)",
    ),
)
@contextlib.contextmanager
def config_use_cache(path, config: dict) -> Iterator[Usage]:
    import functools

    from transformers import PretrainedConfig

    usage = Usage()
    kept: list[str] = []

    def patch(cls) -> None:
        original = cls.__dict__.get("__init__")
        if original is None:
            return

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if "use_cache" in kwargs and not hasattr(self, "use_cache"):
                self.use_cache = kwargs["use_cache"]
                kept.append(type(self).__name__)

        cls.__init__ = __init__

    with on_new_subclasses(PretrainedConfig, patch) if not _use_cache_native() else contextlib.nullcontext():
        yield usage
    usage.count = len(kept)
    if kept:
        usage.detail = f"kept use_cache on {', '.join(sorted(set(kept)))} as config.json gave it"


__all__ = ["KEPT"]
