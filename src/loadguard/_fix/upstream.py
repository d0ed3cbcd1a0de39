"""The upstream patch: the same per-model change ``loadguard fix`` writes into a model's own code, written against the
installed transformers source for tensors that transformers' own classes leave wrong (CLIP's ``logit_scale``, which
its ``_init_weights`` never sets). A diff with transformers' repository paths (``src/transformers/...``), for a pull
request beside the reproducer script; it is not applied and not proven by a load (it changes transformers itself).

Example::

    diff = upstream_patch(model, report)      # "" when no finding comes from transformers' own code
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any

from .. import _codemod
from .._codemod import init_weights_parameter
from ..report import AuditReport, Status
from .plan import RECOMPUTED, Plan, add_branches_to_plan, class_file, owning_module, split_location


def _transformers_file(cls: type) -> str | None:
    name = class_file(cls) or ""
    return name if name.startswith("transformers/") else None


def upstream_patch(model: Any, report: AuditReport) -> str:
    """A unified diff against the installed transformers that recomputes, in the owning class's ``_init_weights``, every
    failing tensor made by transformers' own code (as ``fix`` does for a model's code); "" when there is none."""
    import transformers

    root = Path(transformers.__file__).resolve().parent.parent
    plan = Plan({})
    branches: dict[tuple[str, str], list[_codemod.Branch]] = {}
    for finding in report.failures:
        if (
            not finding.location
            or not finding.location.startswith("transformers/")
            or finding.status not in RECOMPUTED
        ):
            continue
        if (
            finding.kind == "parameter"
            and finding.check != "missing_key"
            or finding.kind == "buffer"
            and finding.persistent
        ):
            continue
        file, line = split_location(finding.location)
        definer = next(
            (k for k in type(owning_module(model, finding.module)).__mro__ if "_init_weights" in vars(k)), None
        )
        target = _transformers_file(definer) if definer is not None else None
        if target is None:
            continue
        for name in (file, target):
            if name not in plan.original and (root / name).is_file():
                plan.original[name] = (root / name).read_text()
        if file not in plan.original or target not in plan.original:
            continue
        live = model.get_submodule(finding.module)
        try:
            branch = _codemod.recompute(
                plan.original[file],
                line,
                finding.tensor.rpartition(".")[2],
                finding.kind,
                on_meta=finding.status == Status.ON_META,
                init_param=init_weights_parameter(plan.original[target], definer.__name__) or "module",
                available=frozenset(n for n in ("config",) if hasattr(live, n)),
            )
        except _codemod.Refused:
            continue
        if branch.keep:  # it would need transformers' constructor to keep an argument: left to the reproducer alone
            continue
        found = branches.setdefault((target, definer.__name__), [])
        if all(b.statements != branch.statements for b in found):
            found.append(dataclasses.replace(branch, tensors=(finding.tensor,)))
    for (target, cls), found in branches.items():
        add_branches_to_plan(plan, target, cls, found)
    return "".join(
        "".join(
            difflib.unified_diff(
                plan.original[name].splitlines(True),
                plan.files[name].splitlines(True),
                f"a/src/{name}",
                f"b/src/{name}",
            )
        )
        for name in sorted(plan.files)
    )


__all__ = ["upstream_patch"]
