"""``audit``: compare a loaded model with what its code and its checkpoint define. Never changes it."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._files import Checkpoint, KeyMap, PageOracle, local_snapshot, map_keys
from .._hf import Offloaded, Replay, initialization, ran_initialization
from .._hf import loading_info as loading
from .._hf import ties as tie_module
from ..errors import LoadguardError
from ..report import AuditReport, CheckSummary, Finding, Status
from . import checks
from .checks import Check
from .inventory import Inventory
from .reference import Reference, build_reference, persistent_buffers_needed
from .where import explained, located


@dataclass
class _Context:
    """What a repair needs from the audit it follows (kept off the JSON)."""

    reference: Reference | None
    checkpoint: Checkpoint | None
    key_map: KeyMap | None


def versions() -> dict[str, str]:
    import transformers

    # torch.__version__ keeps its local part (2.13.0+cpu, 2.14.1+cu130); the build says which kernels ran
    out = {
        "torch": torch.__version__,
        "torch_build": f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU",
        "transformers": transformers.__version__,
    }
    try:
        import accelerate

        out["accelerate"] = accelerate.__version__
    except ImportError:
        pass
    return out


def _model_name(model: nn.Module) -> str:
    """The folder or Hub id the model was loaded from; without one (``from_pretrained(None, state_dict=...)``, a model
    built in memory), its class."""
    config = getattr(model, "config", None)
    for candidate in (getattr(config, "_name_or_path", None), getattr(model, "name_or_path", None)):
        if candidate not in (None, "", "None"):
            return str(candidate)
    return type(model).__name__


def _resolve_checkpoint(model: nn.Module, checkpoint: Any) -> tuple[Checkpoint | None, str]:
    """(the checkpoint, why there is none)."""
    if checkpoint is False:
        return None, "skipped: checkpoint=False"
    if isinstance(checkpoint, Checkpoint):
        return checkpoint, ""
    if checkpoint is None:
        name = _model_name(model)
        if name and os.path.isdir(name):
            try:
                return Checkpoint.open(name), ""
            except LoadguardError as error:
                if "holds no checkpoint" in error.message:
                    return None, f"no checkpoint found in {name}"
                raise
        if name == type(model).__name__:
            return (
                None,
                "no checkpoint folder: the model was not loaded from one (a state dict, a config, a model built in memory); pass checkpoint=PATH",
            )
        return None, "no checkpoint given and the model's name_or_path is not a local folder (pass checkpoint=PATH)"

    snapshot = local_snapshot(str(checkpoint)) if isinstance(checkpoint, (str, os.PathLike)) else None
    return Checkpoint.open(
        snapshot or Path(checkpoint)
    ), ""  # a Hub id: the snapshot its load fetched into the HF cache


def resolve_reference(
    model: nn.Module, reference: Any, persistent_buffers: bool = True
) -> tuple[Reference | None, str]:
    if reference is None or reference is False:
        return None, "skipped: reference=None"
    if isinstance(reference, Reference):
        return reference, ""
    if reference == "auto":
        try:
            return build_reference(model, persistent_buffers=persistent_buffers), ""
        except LoadguardError as error:
            return None, error.message
    raise ValueError(f"reference must be 'auto', None or a Reference, not {reference!r}")


def _offloaded(finding: Finding, offload) -> Finding:

    where = offload.where(finding.tensor)
    return dataclasses.replace(
        finding, device=f"offloaded ({where})", detail=f"{finding.detail} (as accelerate's hook loads it from {where})"
    )


def _hook_reads_the_checkpoint(offload, name: str, checkpoint: Checkpoint, key: str) -> bool:
    """The offload hook reads ``name`` from the very file and tensor the checkpoint holds as ``key`` (and casts
    it as a load would): what it loads is the checkpoint's value, without reading it."""

    source = offload.source(name)
    where = checkpoint.location(key)
    if source is None or where is None:
        return False
    file, weight_name, dtype = source
    same_dtype = dtype is None or dtype == str(checkpoint.dtype(key)).replace("torch.", "")
    return weight_name == key and same_dtype and os.path.realpath(file) == os.path.realpath(str(where[0]))


def _untouched(pages: PageOracle, checkpoint: Checkpoint, key: str, loaded: torch.Tensor) -> bool:
    """The loaded tensor still is, byte for byte, the checkpoint's memory-mapped copy of ``key``."""
    where = checkpoint.location(key)
    if where is None or loaded.device.type != "cpu" or not loaded.is_contiguous():
        return False
    if loaded.dtype != checkpoint.dtype(key) or tuple(loaded.shape) != checkpoint.shape(key):
        return False
    path, start, end = where
    nbytes = loaded.numel() * loaded.element_size()
    return nbytes == end - start and pages.untouched(loaded.data_ptr(), nbytes, str(path), start)


def check_summary(check: Check, checked: int, findings: list[Finding], reason: str = "") -> CheckSummary:
    return CheckSummary(
        check.value,
        True,
        checked=checked,
        failed=sum(f.failing for f in findings),
        unverifiable=sum(f.status == Status.UNVERIFIABLE for f in findings),
        initialized=sum(f.status == Status.INITIALIZED for f in findings),
        reason=reason,
    )


def meta_leftovers(
    inventory: Inventory, offloaded: dict[str, str] | None = None, skip: set[str] = frozenset()
) -> tuple[list[Finding], CheckSummary]:
    """Tensors still on meta. ``skip``: names whose value is elsewhere on purpose (accelerate's offload, verified
    from there; a scan's loaded tensors); ``offloaded``: offloaded names with no value anywhere, and why."""
    offloaded = offloaded or {}
    entries = [e for e in inventory if e.name not in skip]
    found = [f for e in entries if (f := checks.check_meta_leftover(e, offloaded.get(e.name))) is not None]
    return found, check_summary(Check.META_LEFTOVER, len(entries), found)


def computed_state(
    inventory: Inventory,
    ref: Reference | None,
    ref_reason: str,
    on_meta: set[str],
    value: Callable[[str], torch.Tensor] | None = None,
) -> tuple[list[Finding], CheckSummary]:
    """Every non-persistent buffer and tensor attribute (each alias) against what the model's code computes.
    ``value(name)``: where a tensor's value is read (default: the module's own)."""
    value = value or inventory.tensor
    entries = [e for e in inventory.non_persistent_buffers if e.name not in on_meta]
    found: list[Finding] = []
    with torch.no_grad():
        for entry in entries:
            if ref is None:
                expected, why = None, f"the reference could not be built ({ref_reason})"
            else:
                expected = ref.values.get(entry.name)
                why = ref.unverifiable.get(entry.name, f"the model's code does not create this {entry.kind}")
            finding = checks.check_non_persistent_buffer(entry, value(entry.name), expected, why)
            if finding is not None:
                found.append(finding)
    reason = "" if ref is not None else f"no reference: {ref_reason}; only NaN/Inf/INT_MAX were looked for"
    return found, check_summary(Check.NON_PERSISTENT_BUFFER, len(entries), found, reason)


def tied_weights(
    inventory: Inventory, ties, value: Callable[[str], torch.Tensor] | None, loaded_from: Callable[[str], str | None]
) -> list[Finding]:
    """Every declared tie whose target is not the same tensor as its source: its value must still be the source's.
    ``value`` None: a scan (no values; only a tie missing from the checkpoint and not made can be seen);
    ``loaded_from(name)``: the checkpoint key a tensor was loaded from, None when the checkpoint lacks it."""
    found = []
    with torch.no_grad():
        for tie in ties:
            if tie.source in inventory.aliases(tie.target):
                continue  # the same tensor: its value is the source's, verified there
            source_value = value(tie.source) if value is not None else None
            target_value = value(tie.target) if value is not None else inventory.tensor(tie.target)
            finding = checks.check_tie(
                inventory[tie.target], target_value, tie.source, source_value, tie.how, loaded_from(tie.target)
            )
            if finding is not None:
                found.append(finding)
    return found


def _is_missing(name: str, key_map: KeyMap, tie_targets: set[str]) -> bool:
    """A state-dict tensor the checkpoint lacks (not built from other keys, not decided by a tie)."""
    return name not in key_map.to_checkpoint and name not in key_map.fused and name not in tie_targets


def _replay_initialization(model: nn.Module, names: list[str]) -> Replay | None:
    """What transformers' init pass wrote of ``names`` (tensors it should have initialized), replayed with every write
    held back; None when that pass never ran on this model (not loaded by ``from_pretrained``) or nothing is asked."""
    if not names or not ran_initialization(model):
        return None
    return initialization(model, names)


def audit(
    model: nn.Module, checkpoint: Any = None, *, reference: Any = "auto", loading_info: Any = None
) -> AuditReport:
    """Say which tensors of ``model`` are not what its code and its checkpoint define.

    Args:
        model: a model as any loader left it (``from_pretrained``, ``to_empty`` + init, ...).
        checkpoint: the checkpoint it was loaded from: a folder, a ``.safetensors`` / ``.bin`` file, an
            index ``.json``, a Hub id (its snapshot in the HF cache), or a :class:`loadguard._files.checkpoint.Checkpoint`. ``None`` uses the model's
            ``name_or_path`` when it is a local folder; ``False`` skips the checkpoint checks.
        reference: ``"auto"`` builds the reference of the model's buffers from its class and config
            (cached); ``None`` skips the non-persistent-buffer check; or a prebuilt
            :class:`loadguard._audit.reference.Reference`.
        loading_info: what transformers reported about the load (the dict ``output_loading_info=True`` returns, or a
            :class:`loadguard._hf.loading_info.LoadingInfo`); default: what loadguard kept on the model when it loaded it.
            It is evidence, not a verdict: a tensor it reports missing or size-mismatched on request is ``initialized``
            only when a replay of transformers' weight initialization (every write held back) writes it, and
            ``uninitialized`` when nothing does.

    Checks: ``non_persistent_buffer`` (every alias against the reference), ``checkpoint_fidelity``
    (every state-dict tensor the checkpoint holds, exact after the dtype cast), ``missing_key``
    (state-dict tensors the checkpoint lacks: NaN/Inf/INT_MAX), ``meta_leftover``. A check that cannot
    run is reported with the reason. The model, its tensors and the RNG state are not changed.

    Example::

        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
        report = loadguard.audit(model)
        assert report.ok, [f.tensor for f in report.failures]
    """

    info = loading.LoadingInfo.from_transformers(loading_info) if loading_info is not None else loading.of(model)
    info = info or loading.LoadingInfo()
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    inventory = Inventory(model)
    offload = Offloaded(model)  # what accelerate's hooks will load: verified as they will load it, one at a time

    def value(name: str) -> torch.Tensor:
        return offload.value(name) if name in offload else inventory.tensor(name)

    findings: list[Finding] = []
    summaries: list[CheckSummary] = []
    seconds["inventory"] = time.perf_counter() - start

    # meta leftovers first: a tensor with no value is reported once, here, and skipped below
    meta_findings, summary = meta_leftovers(inventory, offload.missing, skip=set(offload))
    findings += meta_findings
    on_meta = {f.tensor for f in meta_findings}
    summaries.append(summary)

    start = time.perf_counter()
    ckpt, ckpt_reason = _resolve_checkpoint(model, checkpoint)
    key_map: KeyMap | None = (
        map_keys(model, ckpt, [e.name for e in inventory.state_entries]) if ckpt is not None else None
    )
    seconds["checkpoint"] = time.perf_counter() - start

    # non-persistent buffers (and tensor attributes) against the reference; persistent buffers only where the
    # checkpoint lacks one (their values then matter: missing keys, repair)
    start = time.perf_counter()
    persistent = key_map is None or persistent_buffers_needed(inventory, key_map.to_checkpoint)
    ref, ref_reason = resolve_reference(model, reference, persistent_buffers=persistent)
    seconds["reference"] = time.perf_counter() - start
    start = time.perf_counter()
    np_findings, summary = computed_state(inventory, ref, ref_reason, on_meta, value)
    findings += np_findings
    summaries.append(summary)
    seconds["buffers"] = time.perf_counter() - start

    # checkpoint fidelity and missing keys (a declared tie target is decided by its tie, below)
    start = time.perf_counter()
    ties = [
        t
        for t in tie_module.declared(model)
        if t.target in inventory and t.source in inventory and not {t.target, t.source} & on_meta
    ]
    tie_targets = {t.target for t in ties}
    state_entries = [e for e in inventory.state_entries if e.name not in on_meta]
    if ckpt is None or key_map is None:
        for check in (Check.CHECKPOINT_FIDELITY, Check.MISSING_KEY):
            summaries.append(CheckSummary(check.value, False, reason=ckpt_reason))
    else:
        fidelity: list[Finding] = []
        missing: list[Finding] = []
        pages = PageOracle()
        proven = 0
        # a tensor transformers flagged as loaded came from keys this map could not follow: not replayed
        replay = _replay_initialization(
            model,
            [
                e.name
                for e in state_entries
                if (_is_missing(e.name, key_map, tie_targets) or e.name in info.mismatched)
                and not getattr(inventory.tensor(e.name), "_is_hf_initialized", False)
            ],
        )
        with torch.no_grad():
            for entry in state_entries:
                key = key_map.to_checkpoint.get(entry.name)
                if (
                    key is not None
                    and entry.name in offload
                    and _hook_reads_the_checkpoint(offload, entry.name, ckpt, key)
                ):
                    proven += 1  # its hook reads the checkpoint's very bytes: equal without reading them
                    continue
                loaded = value(entry.name)  # an offloaded one: read now, compared, dropped
                if key is not None and checks.is_quantized(loaded):
                    fidelity.append(checks.check_quantized(entry, loaded, key))
                elif key is not None:
                    if _untouched(pages, ckpt, key, loaded):
                        proven += 1  # the very bytes of the file, never written since: equal without reading
                        continue
                    finding = checks.check_checkpoint_fidelity(
                        entry, loaded, ckpt.get(key), key, resized=entry.name in info.mismatched, replay=replay
                    )
                    ckpt.release(key)  # one tensor of the file resident at a time
                    if finding is not None:
                        fidelity.append(finding)
                elif entry.name in key_map.fused:
                    fidelity.append(checks.check_fused(entry, key_map.fused[entry.name]))
                elif entry.name not in tie_targets:
                    reference_value = ref.values.get(entry.name) if ref is not None else None
                    missing.append(
                        checks.check_missing_key(
                            entry, loaded, reference_value, reported=entry.name in info.missing, replay=replay
                        )
                    )
        pages.close()
        findings += fidelity + missing
        compared = sum(1 for e in state_entries if e.name in key_map.to_checkpoint)
        notes = []
        if proven:
            rest = (
                f", the other {compared - proven} compared" if compared > proven else ""
            )  # nothing left to compare: not said
            notes.append(
                f"{'all ' if compared == proven else ''}{proven} proven unmodified (the memory map's page state, or an offload hook reading "
                f"the checkpoint's own bytes){rest}"
            )
        if key_map.unexpected:
            notes.append(f"{len(key_map.unexpected)} checkpoint keys map to no tensor of the model")
        if len(offload):
            notes.append(f"{len(offload)} offloaded by accelerate, verified as its hooks load them")
        summaries.append(check_summary(Check.CHECKPOINT_FIDELITY, compared, fidelity, "; ".join(notes)))
        summaries.append(check_summary(Check.MISSING_KEY, len(missing), missing))
    tied = tied_weights(
        inventory,
        ties,
        value,
        (lambda name: key_map.to_checkpoint.get(name))
        if key_map is not None
        else (lambda name: "(no checkpoint to tell)"),
    )
    findings += tied
    summaries.append(check_summary(Check.TIED_WEIGHTS, len(ties), tied))
    seconds["checkpoint"] += time.perf_counter() - start

    findings = [_offloaded(f, offload) if f.tensor in offload else f for f in findings]
    findings = [explained(f, getattr(model, "loadguard_load_warnings", ())) for f in findings]
    overwritten = [f.tensor for f in findings if f.status == Status.OVERWRITTEN]
    writers = _replay_initialization(
        model, overwritten
    )  # the line that wrote each, seen again with the write held back
    findings = located(findings, ref, writers.written if writers is not None else None)
    return AuditReport(
        model=_model_name(model),
        model_class=type(model).__name__,
        checkpoint=str(ckpt.path) if ckpt is not None else None,
        findings=tuple(sorted(findings, key=lambda f: (not f.failing, f.tensor))),
        checks=tuple(summaries),
        unexpected_checkpoint_keys=key_map.unexpected if key_map is not None else (),
        versions=versions(),
        seconds=seconds,
        _context=_Context(ref, ckpt, key_map),
    )
