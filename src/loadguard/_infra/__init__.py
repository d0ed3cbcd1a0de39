"""Infrastructure: what any room may use and nothing of the model's domain. Text made safe for reports (``text``),
paths loadguard creates or deletes (``paths``), the processes a run starts and their containment (``procs``), the fork
pool (``forks``), the per-version environments (``envs``), ``[tool.loadguard]`` (``settings``), sizes as users type
them, the cache folder, where code lives (``locations``), import hooks, the in-process event hook (``observers``), and
the faces of the rooms (``faces``)."""

from __future__ import annotations

from .faces import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "cache": ("cache_folder", "cache_root"),
        "envs": ("Worker",),
        "faces": ("lazy_face",),
        "forks": ("Outcome", "resident"),
        "import_hooks": ("AfterImport",),
        "locations": ("located", "source_path"),
        "packages": ("import_failure",),
        "paths": (
            "fingerprint",
            "inside",
            "leaving",
            "named",
            "remove_tree",
            "unreadable_because",
            "write_atomically",
        ),
        "procs": ("Terminated", "signals_raise"),
        "sizes": ("parse_size",),
        "text": (
            "INDEX",
            "Markup",
            "cell",
            "code",
            "collapse_names",
            "fence",
            "inert",
            "plural",
            "styled",
            "unlinked",
            "visible",
            "xml",
        ),
    },
    modules=("envcache", "envs", "forks", "observers", "procs", "settings"),
)
