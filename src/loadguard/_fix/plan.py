"""What ``loadguard fix`` changes in a model's code, decided from what one load did (the audit's findings, the lines
that made each tensor, the workarounds the load needed), never from a guess about the code.

- a non-persistent buffer, tensor attribute or parameter left uninitialized or on meta: recomputed in the model's
  ``_init_weights`` from the line that made it (:func:`loadguard._codemod.recompute`);
- loaded weights the model's own ``_init_weights`` overwrote: its in-place writes guarded by the loaded flag;
- a ``before_import`` workaround the load needed: the source edit it declares (``Workaround.source_fix``).

Example::

    plan = plan_fix(model, report, folder)
    plan.files      # {"modeling_x.py": new source, ...}
    plan.changes    # what each edit is and which findings it answers
    plan.refused    # what cannot be fixed mechanically, with the reason and the line
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _codemod
from .. import workarounds as registry
from .._infra import leaving, source_path
from ..report import AuditReport, ChangeKind, Status

RECOMPUTED = (Status.UNINITIALIZED, Status.ON_META, Status.MISMATCH)
_TIES = "v4-tied-weights-keys"


@dataclass(frozen=True)
class Change:
    """One edit of one file: what it does and the findings (tensors) or workaround it answers."""

    file: str
    kind: ChangeKind
    description: str
    tensors: tuple[str, ...] = ()
    workaround: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "kind": self.kind,
            "description": self.description,
            "tensors": list(self.tensors),
            "workaround": self.workaround,
        }


@dataclass(frozen=True)
class Refusal:
    """A finding (or a workaround's need) no mechanical edit answers: why, and the line to change by hand."""

    tensor: str
    status: Status
    reason: str
    location: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "status": self.status, "reason": self.reason, "location": self.location}


@dataclass
class Plan:
    original: dict[str, str]
    skipped: dict[str, str] = field(default_factory=dict)
    """Files of the folder left out of the plan (not UTF-8, not parsable), with why."""
    files: dict[str, str] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    def source(self, name: str) -> str:
        return self.files.get(name, self.original[name])

    def edit(self, name: str, text: str) -> None:
        if text != self.source(name):
            self.files[name] = text


def sources(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The model's own code and config as text (line endings as the file has them): every ``*.py`` at the top of its
    folder (a Hub snapshot's links into its blobs included), and ``config.json``; beside it, the files left out and why
    (not UTF-8, not Python libcst parses: a notebook line, Python 2). A left-out file is no error until a change
    needs it."""
    out, skipped = {}, {}
    for file in sorted(folder.glob("*.py")) + [folder / "config.json"]:
        if not file.is_file() or (file.is_symlink() and leaving(folder, file) is not None):
            continue
        try:
            with open(file, encoding="utf-8", newline="") as handle:
                text = handle.read()
        except UnicodeDecodeError:
            skipped[file.name] = "not UTF-8 text"
            continue
        why = _codemod.parse_error(text) if file.suffix == ".py" else None
        if why is not None:
            skipped[file.name] = f"not Python loadguard can parse ({why})"
            continue
        out[file.name] = text
    return out, skipped


def class_file(cls: type) -> str | None:
    """The file that defines ``cls``, named as :func:`loadguard._infra.locations.source_path` names it (``modeling_x.py`` for
    remote code, ``transformers/models/...`` for transformers' own). Remote-code modules may be gone from
    ``sys.modules`` after a load: the file is read off the class's own functions then."""
    try:
        path = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        code = next((f.__code__ for f in vars(cls).values() if hasattr(f, "__code__")), None)
        path = code.co_filename if code is not None else getattr(sys.modules.get(cls.__module__), "__file__", None)
    return source_path(path) if path else None


def _remote_file(cls: type, original: dict[str, str]) -> str | None:
    """The model-folder file that defines ``cls`` (None: not the model's own code)."""
    name = class_file(cls)
    return name if name in original else None


def owning_module(model: Any, module_name: str) -> Any:
    """The nearest ``PreTrainedModel`` at or above the module ``module_name``: whose ``_init_weights`` runs for it."""
    from transformers import PreTrainedModel

    parts = module_name.split(".") if module_name else []
    for depth in range(len(parts), -1, -1):
        candidate = model.get_submodule(".".join(parts[:depth]))
        if isinstance(candidate, PreTrainedModel):
            return candidate
    return model


def _beside(
    model: Any, module_name: str, file: str, target: tuple[str, str], original: dict[str, str]
) -> tuple[str, str]:
    """Where a branch for a class of ``file`` goes: the target, unless that is another file and a model class of the
    owner's MRO lives in ``file`` itself (then that class's ``_init_weights``: no file has to import one that imports it)."""
    from transformers import PreTrainedModel

    if target[0] == file:
        return target
    for klass in type(owning_module(model, module_name)).__mro__:
        if isinstance(klass, type) and issubclass(klass, PreTrainedModel) and _remote_file(klass, original) == file:
            return file, klass.__name__
    return target


def _init_weights_owner(model: Any, module_name: str, original: dict[str, str]) -> tuple[str, str] | None:
    """``(file, class)`` of the model code whose ``_init_weights`` transformers calls for the module ``module_name``:
    the nearest ``PreTrainedModel`` above it, the first class of its MRO that defines ``_init_weights`` when that is the
    model's own code, else the base-most class of the model's own code (which gets one)."""
    from transformers import PreTrainedModel

    mro = [k for k in type(owning_module(model, module_name)).__mro__ if k is not object]
    definer = next((k for k in mro if "_init_weights" in vars(k)), None)
    if definer is not None and (file := _remote_file(definer, original)) is not None:
        return file, definer.__name__
    own = [k for k in mro if _remote_file(k, original) is not None and issubclass(k, PreTrainedModel)]
    if not own:
        return None
    return _remote_file(own[-1], original), own[-1].__name__


def split_location(location: str) -> tuple[str, int]:
    file, _, line = location.rpartition(":")
    return file, int(line)


def plan_fix(
    model: Any,
    report: AuditReport,
    folder: Path,
    workaround_names: list[str],
    init_weights_ran: set[str] | None = None,
) -> Plan:
    """The edits that answer ``report``'s failures on ``model`` (loaded from ``folder``) and the workarounds in
    ``workaround_names`` (those the load needed). ``init_weights_ran``: the modules transformers called ``_init_weights``
    for in that load (None: not observed); a tensor of a module it skipped gets no branch that would never run."""

    plan = Plan(*sources(folder))
    config = json.loads(plan.original.get("config.json", "{}"))
    _workaround_edits(plan, [registry.get(n) for n in workaround_names if n != _TIES], config, model)
    untied = tuple(f.tensor for f in report.failures if f.check == "tied_weights")
    if untied or _TIES in workaround_names:  # the tie edit answers the untied tensors, needed by the load or not
        _workaround_edits(plan, [registry.get(_TIES)], config, model, untied, quiet=_TIES not in workaround_names)
    branches: dict[tuple[str, str], list[_codemod.Branch]] = {}
    keep: dict[tuple[str, str], set[str]] = {}
    overwritten: dict[tuple[str, str], list[str]] = {}
    meta = {(f.location, f.tensor.rpartition(".")[2]) for f in report.failures if f.status == Status.ON_META}
    seen: dict[
        tuple[str, str], tuple[tuple[str, str], _codemod.Branch] | str
    ] = {}  # (where, branch), or why there is none
    answered = {t for c in plan.changes for t in c.tensors}
    for finding in report.failures:
        if finding.tensor in answered:
            continue
        attribute = finding.tensor.rpartition(".")[2]
        made_in = split_location(finding.location)[0] if finding.location else None
        if made_in in plan.skipped:
            plan.refused.append(
                Refusal(
                    finding.tensor,
                    finding.status,
                    f"made in {made_in}, which is {plan.skipped[made_in]}: recompute it in _init_weights by hand",
                    finding.location,
                )
            )
            continue
        target = _init_weights_owner(model, finding.module, plan.original)
        if target is None:
            plan.refused.append(
                Refusal(
                    finding.tensor,
                    finding.status,
                    "the _init_weights transformers calls for it is transformers' own code: an upstream change (result.upstream; `loadguard audit --reproducer DIR` writes it as transformers-upstream.diff)",
                    finding.location,
                )
            )
            continue
        if finding.status == Status.OVERWRITTEN:
            overwritten.setdefault(target, []).append(finding.tensor)
            continue
        if (
            finding.status not in RECOMPUTED
            or (finding.kind == "parameter" and finding.check != "missing_key")
            or (finding.persistent and finding.kind == "buffer")
        ):
            plan.refused.append(
                Refusal(
                    finding.tensor,
                    finding.status,
                    f"{finding.check}: the checkpoint holds its value; no code edit recomputes it",
                    finding.location,
                )
            )
            continue
        if finding.location is None:
            plan.refused.append(
                Refusal(finding.tensor, finding.status, "no line of the model's code was recorded making it", None)
            )
            continue
        file, line = split_location(finding.location)
        if file not in plan.original:
            plan.refused.append(
                Refusal(
                    finding.tensor,
                    finding.status,
                    f"made in {file}, outside the model's folder (transformers' own code: an upstream change)",
                    finding.location,
                )
            )
            continue
        host = None  # transformers skips this module's _init_weights: the nearest ancestor it runs for, if any
        if init_weights_ran is not None and finding.kind != "parameter" and finding.module not in init_weights_ran:
            host = _host(model, finding.module, init_weights_ran, file)
            if isinstance(host, str):
                plan.refused.append(Refusal(finding.tensor, finding.status, host, finding.location))
                continue
        key = (finding.location, attribute, host[1] if host else "")
        if key not in seen:
            placed = _beside(model, finding.module, file, target, plan.original)
            try:
                live = model.get_submodule(finding.module)
                parameter = _codemod.init_weights_parameter(plan.source(placed[0]), placed[1]) or "module"
                made = _codemod.recompute(
                    plan.original[file],
                    line,
                    attribute,
                    finding.kind,
                    on_meta=(finding.location, attribute) in meta,
                    init_param="inner" if host else parameter,
                    available=frozenset(n for n in ("config",) if hasattr(live, n)),
                    owner=type(live).__name__,
                )
            except _codemod.Refused as why:
                seen[key] = f"{why}: recompute it in _init_weights by hand"
            else:
                if (
                    host
                ):  # run where transformers calls _init_weights: for the ancestor, reaching the module by its path
                    made = dataclasses.replace(
                        made,
                        cls=host[0],
                        statements=(f"inner = {parameter}.get_submodule({host[1]!r})", *made.statements),
                    )
                    keep.setdefault((file, type(live).__name__), set()).update(made.keep)
                else:
                    keep.setdefault((file, made.cls), set()).update(made.keep)
                seen[key] = (placed, dataclasses.replace(made, tensors=()))
                branches.setdefault(placed, []).append(seen[key][1])
        if isinstance(seen[key], str):
            plan.refused.append(Refusal(finding.tensor, finding.status, seen[key], finding.location))
            continue
        _answered(branches[seen[key][0]], seen[key][1], finding.tensor)
    for (file, cls), names in keep.items():
        if names:
            _edit(
                plan,
                file,
                lambda s, c=cls, n=sorted(names): _codemod.keep_arguments(s, c, n),
                Change(
                    file,
                    ChangeKind.KEEP_ARGUMENTS,
                    f"{cls}.__init__ keeps {', '.join(sorted(names))} so _init_weights can recompute from it",
                ),
            )
    for (file, cls), tensors in overwritten.items():
        guarded = _edit(
            plan,
            file,
            lambda s, c=cls: _codemod.guard_writes(s, c)[0],
            Change(
                file,
                ChangeKind.GUARD_OVERWRITES,
                f"{cls}._init_weights leaves tensors the checkpoint loaded alone (transformers 5's _is_hf_initialized flag)",
                tuple(tensors),
            ),
        )
        if not guarded:
            plan.refused += [
                Refusal(
                    t,
                    Status.OVERWRITTEN,
                    f"{cls}._init_weights has no in-place write loadguard can guard: the write is elsewhere",
                    None,
                )
                for t in tensors
            ]
    for (file, cls), found in branches.items():
        add_branches_to_plan(plan, file, cls, _codemod.merge(found))
    return plan


def _host(model: Any, module_name: str, ran: set[str], file: str) -> tuple[str, str] | str:
    """``(class, path below it)`` of the nearest ancestor of ``module_name`` that transformers runs ``_init_weights`` for
    (observed in the load) and whose class lives in ``file`` too; else why there is none (a refusal's reason)."""
    parts = module_name.split(".") if module_name else []
    for depth in range(len(parts) - 1, -1, -1):
        ancestor = ".".join(parts[:depth])
        if ancestor in ran:
            cls = type(model.get_submodule(ancestor))
            if class_file(cls) == file:
                return cls.__name__, ".".join(parts[depth:])
            break
    live = type(model.get_submodule(module_name)).__name__
    return (
        f"transformers never calls _init_weights for {module_name or 'the model'} ({live}): everything it holds loads, "
        "so a branch there would never run, and no module above it in the same file gets one either; make the tensor "
        "a non-persistent buffer, or compute it where it is used, by hand"
    )


def _answered(found: list[_codemod.Branch], branch: _codemod.Branch, tensor: str) -> None:
    """Record ``tensor`` as answered by ``branch`` (several tensors, aliases or layers, share one line)."""
    for index, known in enumerate(found):
        if known.statements == branch.statements and known.cls == branch.cls and tensor not in known.tensors:
            found[index] = dataclasses.replace(known, tensors=known.tensors + (tensor,))
            return


def _edit(plan: Plan, file: str, how, change: Change) -> bool:
    try:
        before = plan.source(file)
        plan.edit(file, how(before))
    except _codemod.Refused as why:
        plan.refused += [Refusal(t, "", str(why)) for t in change.tensors]
        return False
    if plan.source(file) != before:
        plan.changes.append(change)
        return True
    return False


def add_branches_to_plan(plan: Plan, file: str, cls: str, branches: list[_codemod.Branch]) -> None:
    """The branches into ``cls._init_weights`` of ``file``, with the imports they need there."""
    imports = ["import torch"]
    for branch in branches:
        defining = _defining_file(plan, branch.cls)
        for name in sorted(branch.globals | {branch.cls}):
            if name not in _codemod.bound_names(plan.source(file)) and defining is not None:
                statement = _codemod.import_of(plan.original[defining], name, Path(defining).stem)
                if statement is not None:
                    imports.append(statement)
    tensors = tuple(t for b in branches for t in b.tensors)
    text = _codemod.ensure_imports(plan.source(file), imports)
    try:
        text = _codemod.add_branches(text, cls, branches)
    except _codemod.Refused as why:
        plan.refused += [Refusal(t, "", str(why)) for t in tensors]
        return
    plan.edit(file, text)
    for branch in branches:
        plan.changes.append(
            Change(
                file,
                ChangeKind.RECOMPUTE,
                f"{cls}._init_weights recomputes {', '.join(dict.fromkeys(t.rpartition('.')[2] for t in branch.tensors))} of {branch.cls} as its __init__ makes it",
                branch.tensors,
            )
        )


def _defining_file(plan: Plan, cls: str) -> str | None:
    return next(
        (
            name
            for name, text in plan.original.items()
            if name.endswith(".py") and cls in _codemod.bound_names(text) and f"class {cls}" in text
        ),
        None,
    )


def _workaround_edits(
    plan: Plan, items: list, config: dict, model: Any, tensors: tuple[str, ...] = (), quiet: bool = False
) -> None:
    """The source fix of each workaround in ``items``; ``tensors``: findings it answers too (``quiet``: finding nothing to
    change is no refusal: the findings are refused on their own)."""
    for item in items:
        fix = item.source_fix
        if fix is None or isinstance(fix, str):
            plan.refused.append(Refusal("", "", f"workaround {item.name}: {fix or 'declares no source fix'}"))
            continue
        try:
            changed, description = fix({name: plan.source(name) for name in plan.original}, config, model)
        except _codemod.Refused as why:  # what it left for a person; the edits it could make, if any, still apply
            plan.refused.append(Refusal("", "", f"workaround {item.name}: {why}"))
            if not why.changed:
                continue
            changed, description = why.changed, why.description
        for name, text in changed.items():
            if text == plan.source(name):
                continue
            plan.edit(name, text)
            said = description.get(name, "") if isinstance(description, dict) else description  # per file, or one
            plan.changes.append(Change(name, ChangeKind.WORKAROUND, said, tensors, item.name))
        if (
            not changed
            and not quiet
            and not any(r.reason.startswith(f"workaround {item.name}:") for r in plan.refused)
        ):
            plan.refused.append(
                Refusal(
                    "",
                    "",
                    f"workaround {item.name}: its source fix found nothing to change in the model's files"
                    + "".join(f"; {name} was left out: {why}" for name, why in plan.skipped.items()),
                )
            )


__all__ = ["Change", "Plan", "Refusal", "plan_fix", "sources"]
