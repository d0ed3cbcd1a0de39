"""What code written for transformers 4 can touch and transformers 5 changed, as data: `make api-diff`.

    python tools/api_diff.py OLD.json NEW.json [OLDER.json ...] > src/loadguard/workarounds/data/api_diff.json

OLD/NEW are ``tools/api_surface.py --modules all`` dumps (4.57 in ``.venv-compat``, the pinned 5.x in ``.venv``);
each OLDER is one of a 4.x release before 4.57 (``make api-diff`` dumps a spread of them in loadguard's per-version
environments): code written for 4.36 imports names 4.57 had already dropped (``_expand_mask``,
``LlamaFlashAttention2``), and 5.x lacks them too. What an older release adds is an entry 4.57's diff does not have,
marked ``"last_in"`` with the newest of those releases that had it (and ``"via": "GenerationMixin"`` for a
``PreTrainedModel`` name it only inherited from ``GenerationMixin``, as it did until 4.50); signatures are 4.57's only (an older signature
is not what 5.x is compared with by any workaround). Run with the new side's transformers installed: a name its lazy
modules still resolve (``AlbertTokenizerFast``) is not listed.
Entries, each with an ``id`` the workarounds' coverage is written against (``tests/workarounds/test_api_diff.py``):

- ``config:NAME`` an attribute every 4.x config carried (with its 4.x value) that 5.x configs lack;
- ``model:CLASS.NAME`` a class-level name of ``PreTrainedModel`` / ``GenerationMixin`` / ``Cache`` / ``DynamicCache``
  gone in 5.x;
- ``signature:CLASS.NAME`` a method whose parameters changed (4.x and 5.x parameters);
- ``name:MODULE:NAME`` a module-level name gone from a module 5.x still has (with where 4.x's object lived);
- ``module:MODULE`` a module gone: one the dumps list, or one 4.x's objects lived in (``"origin_of"``: a name
  of a dumped module that 4.x imported from it) that the new side cannot find
  (``transformers.utils.model_parallel_utils``);
- ``star:MODULE`` the names a star import of a module 5.x still has brought on 4.x and no longer brings, though the
  module still has them (``"lost"``: 5.x's modules declare ``__all__``; ``from ...modeling_bart import *`` then
  ``BartConfig``); ``auto:NAME`` an auto class gone.
"""

from __future__ import annotations

import json
import sys

from packaging.version import Version


def diff(old: dict, new: dict) -> dict:
    entries = []
    for name in sorted(set(old["config"]) - set(new["config"])):
        entries.append({"id": f"config:{name}", "v4": old["config"][name]})
    for cls in sorted(old["model"]):
        before, after = old["model"][cls], new["model"].get(cls, {})
        for name in sorted(set(before) - set(after)):
            entries.append({"id": f"model:{cls}.{name}", "v4": before[name]})
        for name in sorted(set(before) & set(after)):
            a, b = before[name].get("parameters"), after[name].get("parameters")
            if a is not None and b is not None and a != b:
                entries.append({"id": f"signature:{cls}.{name}", "v4": a, "v5": b})
    for module in sorted(old["modules"]):
        names = old["modules"][module]
        if names is None:
            continue
        if new["modules"].get(module) is None:
            entries.append({"id": f"module:{module}"})
            continue
        for name in sorted(set(names) - set(new["modules"][module])):
            entries.append({"id": f"name:{module}:{name}", "origin": names[name]})
    entries += _vanished_homes(old, new)
    entries += _star_losses(old, new)
    for name in sorted(set(old["auto"]) - set(new["auto"])):
        entries.append({"id": f"auto:{name}"})
    return {"from": old["transformers"], "to": new["transformers"], "entries": entries}


def _vanished_homes(old: dict, new: dict) -> list[dict]:
    """The modules 4.x's objects lived in that no dump lists and the new side has not dumped: candidates, each with
    one name that came from it; :func:`resolvable` keeps those the new side cannot find."""
    homes: dict[str, str] = {}
    for module, names in sorted(old["modules"].items()):
        for name, origin in sorted((names or {}).items()):
            if not origin or origin.startswith(("value:", "typing:")) or not origin.startswith("transformers"):
                continue
            home = origin.partition(":")[0] if ":" in origin else origin
            if home not in old["modules"] and home not in new["modules"]:
                homes.setdefault(home, f"{module}:{name}")
    return [{"id": f"module:{home}", "origin_of": name, "vanished": True} for home, name in sorted(homes.items())]


def _star_losses(old: dict, new: dict) -> list[dict]:
    """Per module both sides have: the names a star import brought on the old side and does not on the new one,
    though the module still has them (a name gone from the module is its own ``name:`` entry)."""
    entries = []
    for module, before in sorted(old.get("stars", {}).items()):
        after, present = new.get("stars", {}).get(module), new["modules"].get(module)
        if after is None or present is None:
            continue
        lost = sorted((set(before) - set(after)) & set(present))
        if lost:
            entries.append({"id": f"star:{module}", "lost": lost})
    return entries


def merged(old: dict, new: dict, older: list[dict]) -> dict:
    """4.57's diff, plus what each older release had that 5.x lacks and 4.57's diff does not list."""
    result = diff(old, new)
    known = {entry["id"] for entry in result["entries"]}
    for dump in sorted(older, key=lambda d: Version(d["transformers"]), reverse=True):  # newest first: last_in
        inherited = set(dump["model"].get("GenerationMixin", {}))  # PreTrainedModel inherited it until 4.50
        for entry in diff(dump, new)["entries"]:
            if entry["id"] not in known and not entry["id"].startswith("signature:"):
                known.add(entry["id"])
                entry = {**entry, "last_in": dump["transformers"]}
                if entry["id"].startswith("model:PreTrainedModel.") and entry["id"].split(".", 1)[1] in inherited:
                    entry["via"] = "GenerationMixin"
                result["entries"].append(entry)
    result["entries"].sort(key=lambda entry: entry["id"])
    result["older"] = sorted((dump["transformers"] for dump in older), key=Version)
    return result


def resolvable(result: dict) -> dict:
    """Drop the name entries the running transformers gives after all, when it is the diff's new side: a lazy
    module's fallbacks resolve names no table lists (5.x's ``AlbertTokenizerFast`` is ``AlbertTokenizer``)."""
    import importlib
    import importlib.util
    import warnings

    import transformers

    if transformers.__version__ != result["to"]:
        print(f"api_diff: transformers {transformers.__version__} is not {result['to']}: not probed", file=sys.stderr)
        return result
    kept = []
    for entry in result["entries"]:
        kind, _, rest = entry["id"].partition(":")
        if entry.get("vanished"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if importlib.util.find_spec(rest) is not None:
                        continue
            except Exception:
                pass
        if kind == "name":
            module, _, name = rest.partition(":")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    getattr(importlib.import_module(module), name)
                continue
            except Exception:
                pass
        kept.append(entry)
    return {**result, "entries": kept}


def main() -> None:
    old, new, *older = (json.load(open(path)) for path in sys.argv[1:])
    real, sys.stdout = sys.stdout, sys.stderr  # transformers prints while resolving: keep it off the JSON
    try:
        result = resolvable(merged(old, new, older))
    finally:
        sys.stdout = real
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
