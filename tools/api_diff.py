"""What code written for transformers 4 can touch and transformers 5 changed, as data: `make api-diff`.

    python tools/api_diff.py OLD.json NEW.json > src/loadguard/workarounds/data/api_diff.json

OLD/NEW are ``tools/api_surface.py --modules all`` dumps (4.57 in ``.venv-compat``, the pinned 5.x in ``.venv``).
Entries, each with an ``id`` the workarounds' coverage is written against (``tests/workarounds/test_api_diff.py``):

- ``config:NAME`` an attribute every 4.x config carried (with its 4.x value) that 5.x configs lack;
- ``model:CLASS.NAME`` a class-level name of ``PreTrainedModel`` / ``GenerationMixin`` gone in 5.x;
- ``signature:CLASS.NAME`` a method whose parameters changed (4.x and 5.x parameters);
- ``name:MODULE:NAME`` a module-level name gone from a module 5.x still has (with where 4.x's object lived);
- ``module:MODULE`` a module gone; ``auto:NAME`` an auto class gone.
"""

from __future__ import annotations

import json
import sys


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
    for name in sorted(set(old["auto"]) - set(new["auto"])):
        entries.append({"id": f"auto:{name}"})
    return {"from": old["transformers"], "to": new["transformers"], "entries": entries}


def main() -> None:
    old, new = (json.load(open(path)) for path in sys.argv[1:3])
    json.dump(diff(old, new), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
