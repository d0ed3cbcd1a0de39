"""``repair``: put back what the audit found wrong, all or nothing, then prove it with a re-audit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from .._hf import Offloaded
from .._hf import ties as tie_module
from ..report import AuditReport, RepairResult, Unrepaired
from .auditing import audit
from .checks import Check
from .inventory import Inventory


@dataclass(frozen=True)
class _Plan:
    names: tuple[str, ...]  # every name that gets ``value`` (aliases share one tensor)
    value: torch.Tensor
    in_place: bool  # copy into the existing tensor (keeps parameters, ties and optimizer references)
    offloaded: bool = False  # held by accelerate's offload hook: the value goes where the hook reads it


def repair(model: nn.Module, report: AuditReport) -> RepairResult:
    """Repair what ``report`` (an audit of ``model``) found, and re-audit.

    - non-persistent buffers, every alias: the value the model's code computes (the reference), in the
      loaded dtype and device; aliases that a correct build shares get one shared tensor again, so a
      buffer left on meta is re-pointed to the real one;
    - weights that differ from the checkpoint (overwritten, uninitialized): the checkpoint's value,
      copied in place so parameters, tied weights and references to them stay the same objects;
    - tensors left on meta: the checkpoint's or the reference's value, on the model's device;
    - tensors the model declares tied that a load left untied: tied again (the source's very tensor, as
      ``tie_weights`` would);
    - tensors accelerate offloads (cpu or disk): the right value where its hook reads it, in memory (the offload
      folder and the checkpoint are never written), so the model computes with it from the next forward on.

    All new values are computed before any is assigned: if one cannot be computed nothing changes.
    What has no value anywhere (a parameter missing from the checkpoint) is listed in ``unrepaired``
    with the reason. ``result.ok`` says whether the re-audit is clean.

    Example::

        report = loadguard.audit(model)
        result = loadguard.repair(model, report)
        assert result.ok, result.unrepaired
    """
    context = report._context
    reference = context.reference if context is not None else None
    checkpoint = context.checkpoint if context is not None else None
    key_map = context.key_map if context is not None else None

    inventory = Inventory(model)
    offload = Offloaded(model)
    device = _model_device(inventory)
    plans: list[_Plan] = []
    unrepaired: list[Unrepaired] = []
    planned: set[str] = set()
    retie: list[tuple[str, str]] = []  # (target, source): made the same tensor again, as tie_weights would
    sources = {tie.target: tie.source for tie in tie_module.declared(model)}
    with torch.no_grad():
        for finding in report.failures:
            name = finding.tensor
            if name in planned:
                continue
            if name not in inventory:
                unrepaired.append(Unrepaired(name, "the model no longer has this tensor"))
                continue
            if finding.check == Check.TIED_WEIGHTS.value:
                source = sources.get(name)
                if source is None or source not in inventory or inventory[name].kind != inventory[source].kind:
                    unrepaired.append(Unrepaired(name, "the model no longer declares the tie"))
                    continue
                retie.append((name, source))
                planned.add(name)
                continue
            entry = inventory[name]
            current = inventory.tensor(name)
            offloaded = name in offload
            if offloaded and (why := offload.can_replace(name)):
                unrepaired.append(Unrepaired(name, why))
                continue
            target_device = torch.device("cpu") if offloaded else (device if entry.on_meta else current.device)
            key = key_map.to_checkpoint.get(name) if key_map is not None else None
            if entry.persistent and key is not None and checkpoint is not None:
                stored = checkpoint.get(key)
                if tuple(stored.shape) != tuple(current.shape):
                    unrepaired.append(
                        Unrepaired(
                            name,
                            f"its shape {tuple(current.shape)} differs from checkpoint {key!r} {tuple(stored.shape)}",
                        )
                    )
                    continue
                value = stored.to(device=target_device, dtype=current.dtype, copy=True)
                group = tuple(inventory.aliases(name))
                plans.append(_Plan(group, value, in_place=not entry.on_meta, offloaded=offloaded))
                planned.update(group)
            elif reference is not None and name in reference.values:
                group = tuple(n for n in reference.group(name) if n in inventory)
                source = reference.values[name]
                loaded_dtypes = {inventory.tensor(n).dtype for n in group}
                dtype = current.dtype if len(loaded_dtypes) == 1 else source.dtype
                value = source.to(device=target_device, dtype=dtype, copy=True)
                plans.append(_Plan(group, value, in_place=False, offloaded=offloaded))
                planned.update(group)
            else:
                unrepaired.append(Unrepaired(name, _why_not(finding.check, name, reference, checkpoint)))
        for plan in plans:  # assign only once every value exists
            if plan.offloaded:
                for name in plan.names:
                    offload.replace(name, plan.value)
            else:
                _assign(model, inventory, plan)
        for target, source in retie:
            entry = inventory[target]
            table = (
                model.get_submodule(entry.module)._parameters
                if entry.kind == "parameter"
                else model.get_submodule(entry.module)._buffers
            )
            table[entry.attribute] = inventory.tensor(source)
    after = audit(model, checkpoint if checkpoint is not None else False, reference=reference)
    repaired = tuple(name for plan in plans for name in plan.names) + tuple(target for target, _ in retie)
    if repaired:  # the re-audit says how the model got the values it now holds
        shown = ", ".join(repaired[:5]) + (f" and {len(repaired) - 5} more" if len(repaired) > 5 else "")
        after = dataclasses.replace(
            after, method="; ".join(filter(None, (after.method, f"repaired by loadguard.repair: {shown}")))
        )
    return RepairResult(repaired=repaired, unrepaired=tuple(unrepaired), before=report, after=after)


def _why_not(check: str, name: str, reference, checkpoint) -> str:
    if check == Check.MISSING_KEY.value:
        return (
            "no value anywhere: the checkpoint does not hold it and the model's code does not compute it "
            "(a parameter); add an _init_weights branch for it or supply the value"
        )
    if reference is None and checkpoint is None:
        return "neither a reference nor a checkpoint was available to the audit"
    if reference is not None and name in reference.unverifiable:
        return f"no trustworthy value: {reference.unverifiable[name]}"
    return "neither the checkpoint nor the model's code provides its value"


def _model_device(inventory: Inventory) -> torch.device:
    for entry in inventory:
        if not entry.on_meta:
            return entry.device
    return torch.device("cpu")


def _assign(model: nn.Module, inventory: Inventory, plan: _Plan) -> None:
    """Give every name of the plan the new value; names that share a tensor keep sharing one object."""
    first = inventory[plan.names[0]]
    if plan.in_place:
        inventory.tensor(first.name).copy_(plan.value)
        return
    if first.kind == "parameter":
        shared: torch.Tensor = nn.Parameter(plan.value, requires_grad=inventory.tensor(first.name).requires_grad)
    else:
        shared = plan.value
    for name in plan.names:
        entry = inventory[name]
        module = model.get_submodule(entry.module)
        if entry.kind == "attribute":
            object.__setattr__(module, entry.attribute, shared)
            continue
        table = module._parameters if entry.kind == "parameter" else module._buffers
        table[entry.attribute] = shared
