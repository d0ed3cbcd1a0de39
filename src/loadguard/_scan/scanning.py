"""``scan``: predict what a load would get wrong, without a single weight byte.

The installed transformers' own ``from_pretrained`` runs on a state dict of weightless (meta) tensors whose keys,
shapes and dtypes come from the checkpoint's safetensors headers, or, with no checkpoint, from the model's own
state dict ("the checkpoint holds every key"). Everything after reading bytes is transformers' real pipeline:
renamings, fusions, loaded-flags, moving missing keys off meta, ``_init_weights``, tying. Then the usual
inventory, reference and checks run on what it left (see :mod:`loadguard._hf.patches` for what is patched; the
first scan on a transformers version proves it there, :mod:`loadguard._scan.selfcheck`):

- non-persistent buffers, tensor attributes and every alias: against the reference, as an audit;
- loaded weights that weight initialization writes into or replaces after loading: ``overwritten``;
- keys the checkpoint lacks (header keys): left as poisoned memory -> ``uninitialized``;
- tensors left on meta that nothing loads: ``on_meta``.

What it cannot see (a buffer derived from parameter values, one drawn from random numbers) is ``unverifiable``
with the reason; never a silent pass. Every finding is marked as a prediction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import torch

from .. import _hf
from .. import workarounds as registry
from .._audit import (
    Inventory,
    check_summary,
    checks,
    computed_state,
    located,
    meta_leftovers,
    persistent_buffers_needed,
    resolve_reference,
    tied_weights,
    versions,
)
from .._hf import (
    WEIGHTLESS_METHOD,
    CompleteKeys,
    InitWrites,
    complete_keys_from_the_model,
    constructing_with_meta_writes_skipped,
    loaded_tensors,
    parameters_stay_on_meta,
    poison,
    recording_init_writes,
    weightless_load_options,
    weightless_state_dict,
)
from .._hf import ties as tie_module
from .._infra import observers
from ..errors import InvalidOptionError, LoadguardError, ScanError
from ..report import AuditReport, Check, CheckSummary, Finding
from . import selfcheck
from . import source as _scan_source
from .classes import concrete_class, config_dtype, own_keys, own_loader, through_own_loader

KEYS = ("auto", "header", "complete")


def scan(
    path_or_config: Any,
    *,
    model_class: Any = None,
    keys: str = "auto",
    dtype: Any = None,
    workarounds: Any = (),
    trust_remote_code: bool = False,
    revision: str | None = None,
    device_map: Any = None,
    max_memory: dict | None = None,
    offload_folder: Any = None,
    follow_links: bool = False,
    assume_checkpoint: str = "saved",
) -> AuditReport:
    """Predict, without reading weights, what ``from_pretrained`` would leave wrong in a model: the report of
    :func:`scan_with_model`, whose arguments these are (a local folder, a Hub id or a config; ``keys``, ``dtype``,
    ``workarounds``, ``trust_remote_code`` as ``from_pretrained`` and ``loadguard.load`` take them).

    Returns an :class:`loadguard.AuditReport` with ``mode == "scan"``; each finding has ``predicted=True``.

    Example::

        report = loadguard.scan("./MiniCPM-V-2_6", trust_remote_code=True, workarounds="auto")
        [f.tensor for f in report.failures]      # ['resampler.pos_embed']
    """
    return scan_with_model(**locals())[1]


def scan_with_model(
    path_or_config: Any,
    *,
    model_class: Any = None,
    keys: str = "auto",
    dtype: Any = None,
    workarounds: Any = (),
    trust_remote_code: bool = False,
    revision: str | None = None,
    device_map: Any = None,
    max_memory: dict | None = None,
    offload_folder: Any = None,
    follow_links: bool = False,
    assume_checkpoint: str = "saved",
) -> tuple[Any, AuditReport]:
    """Predict, without reading weights, what ``from_pretrained`` would leave wrong in a model; the model as the
    weightless load left it (parameters on meta) comes back beside the report (``loadguard fix`` plans from both).

    Args:
        path_or_config: a local model folder, a Hub id (only ``*.json``/``*.py`` are fetched; the safetensors
            headers too with ``keys="header"``, by HTTP range reads) or a ``PretrainedConfig``.
        model_class: an auto class or model class, or its name (default: the one the config names, then the
            causal-LM entry of its ``auto_map``).
        keys: ``"header"`` (the checkpoint's keys, shapes and dtypes from its safetensors headers: keys it lacks
            are predicted as missing), ``"complete"`` (the checkpoint holds every key of the model's state dict),
            or ``"auto"`` (header when a local checkpoint is there, complete otherwise, and for a Hub id).
        dtype: as ``from_pretrained``'s ``dtype=``.
        workarounds: as for :func:`loadguard.load`: ``before_import`` ones (or ``"auto"``) run around the load;
            ``after_load`` ones are reported ``needed`` (their targets predicted broken) or ``stale``, not applied;
            ``runner`` ones have nothing to act on in a scan and are left out.
        trust_remote_code: run the model's own code (never implied).

        assume_checkpoint: with ``keys="auto"`` and no checkpoint headers to read (no local safetensors, a Hub id without
            ``keys="header"``, a ``.bin``-only repository): ``"saved"`` (the default) predicts the load of what this code's
            own ``save_pretrained`` writes (its declared ties dropped, as 4.x and 5.x save), ``"complete"`` assumes every
            key of the state dict is there. The report names the assumption (``checkpoint``, the missing-key check).
        follow_links: read a config or checkpoint file of the folder that is a link leading out of it (refused
            otherwise: :class:`loadguard.errors.InvalidOptionError`; a Hub snapshot's links to its blobs are its own).
        device_map, max_memory, offload_folder: as ``from_pretrained`` takes them; a scan predicts a load on one
            device (``None``, ``"cpu"``): offloading changes what initialization can touch and is not simulated
            (:class:`loadguard.errors.ScanError` says so; audit a full load with the same options instead).

    Returns ``(model, report)``: an :class:`loadguard.AuditReport` with ``mode == "scan"``; each finding has
    ``predicted=True``.
    """
    if keys not in KEYS:
        raise InvalidOptionError(f"keys={keys!r} is not a key source", f"use one of: {', '.join(KEYS)}")
    if assume_checkpoint not in ("saved", "complete"):
        raise InvalidOptionError(
            f"assume_checkpoint={assume_checkpoint!r} is not an assumption", "use saved or complete"
        )
    if device_map not in (None, "cpu", {"": "cpu"}) or max_memory or offload_folder:
        raise ScanError(
            f"a scan predicts a load on one device; device_map={device_map!r}{' with max_memory' if max_memory else ''}"
            f"{' and an offload folder' if offload_folder else ''} (offloading) is not simulated",
            "audit a full load with the same options: loadguard audit PATH --device-map ... (offloaded tensors are verified there)",
        )

    start = time.perf_counter()
    selfcheck.ensure(
        scan
    )  # never trust transformers internals by version name: the first scan on a combination proves them
    seconds: dict[str, float] = {"selfcheck": time.perf_counter() - start}
    start = time.perf_counter()
    # local headers are read by default (auto); a Hub id's only when asked for (keys="header": HTTP range reads)
    source = _scan_source.source(
        path_or_config,
        trust_remote_code,
        revision,
        header=keys != "complete",
        hub_header=keys == "header",
        follow_links=follow_links,
    )
    if keys == "header" and source.header is None:
        raise ScanError(
            f"{source.name} has no safetensors checkpoint whose headers could be read",
            "scan with keys='complete' (--keys complete): the checkpoint is assumed to hold every key",
        )
    quantized = _scan_source.quantization(source.config)
    if quantized and keys == "header":
        raise ScanError(
            f"{source.name} is a {quantized}-quantized checkpoint: its headers hold the quantizer's tensors (packed weights, "
            "scales, zero points), not the model's",
            "scan with keys='complete' (--keys complete, the default picks it): the scan predicts the model as the load "
            "builds it before quantizing",
        )
    mode = (
        "header"
        if keys == "header" or (keys == "auto" and source.header is not None and not quantized)
        else "complete"
    )
    if mode == "complete" and keys == "auto" and assume_checkpoint == "saved":
        mode = "saved"  # no headers: the keys this code's own save_pretrained writes
    parsed_dtype = _hf.parse_dtype(dtype) if dtype is not None else None
    record = InitWrites()

    def attempt(active: tuple[str, ...]):
        record.writes.clear()
        record.replaced.clear()
        record.where.clear()
        try:
            auto_class = _hf.resolve_class(model_class, source.config)  # inside the workarounds, as a load resolves it
            config = (
                source.config_object
                if source.config_object is not None
                else _scan_source.load_config(source, trust_remote_code)
            )
            if quantized:  # no weight is read, so no quantization backend is needed: predict the model it quantizes
                _scan_source.drop_quantization(config)
            concrete = concrete_class(auto_class, config, source, trust_remote_code)
            kwargs: dict[str, Any] = {"config": config, **weightless_load_options()}
            if parsed_dtype is not None:
                kwargs["dtype"] = parsed_dtype
            with contextlib.ExitStack() as stack:
                if mode in ("complete", "saved") and stack.enter_context(complete_keys_from_the_model()):
                    kwargs["state_dict"] = CompleteKeys(
                        saved=mode == "saved"
                    )  # filled from the model transformers constructs
                    kwargs.setdefault("dtype", config_dtype(config) or torch.float32)
                else:
                    shapes = (
                        source.header
                        if mode == "header"
                        else own_keys(concrete, config, parsed_dtype, saved=mode == "saved")
                    )
                    if any(v is None for v in shapes.values()):  # a .bin index names keys only: shapes from the model
                        own = own_keys(concrete, config, parsed_dtype)
                        shapes = {key: own[key] for key in shapes if key in own}
                    kwargs["state_dict"] = weightless_state_dict(shapes)
                for context in (
                    poison(),
                    recording_init_writes(record),
                    parameters_stay_on_meta(),
                    constructing_with_meta_writes_skipped(concrete),
                ):
                    stack.enter_context(context)
                where = str(source.folder) if source.folder is not None and own_loader(concrete) else None
                return through_own_loader(concrete, lambda: concrete.from_pretrained(where, **kwargs))
        except LoadguardError:
            raise
        except Exception as error:
            raise _hf.translate(error, source.name, active) from error

    token = observers.inside_load.set(True)  # loadguard's own load: the pytest plugin must not audit it again
    try:
        model, outcomes = registry.attempt(
            attempt, workarounds, source.folder, {"_name_or_path": source.name, **source.config}
        )
    finally:
        observers.inside_load.reset(token)
    registry.remember(model, outcomes)
    model.config._name_or_path = (
        str(source.folder) if source.folder is not None else source.name
    )  # from_pretrained(None) cleared it
    seconds["load"] = time.perf_counter() - start
    report = _predict(model, source, mode, record, seconds, quantized)
    later = registry.predict_after_load(model, registry.resolve(workarounds), report)
    return model, dataclasses.replace(report, workarounds=tuple(outcomes) + tuple(later))


def _predict(
    model,
    source: _scan_source.Source,
    mode: str,
    record: InitWrites,
    seconds: dict[str, float],
    quantized: str | None = None,
) -> AuditReport:

    start = time.perf_counter()
    inventory = Inventory(model)
    loaded = set(loaded_tensors(model))
    findings: list[Finding] = []
    summaries: list[CheckSummary] = []
    meta_findings, summary = meta_leftovers(inventory, skip=loaded)
    findings += meta_findings
    summaries.append(summary)
    on_meta = {f.tensor for f in meta_findings}
    # where the checkpoint holds every persistent buffer, their values (int8 weights of code that quantizes itself:
    # the model's size) are not built
    reference, reason = resolve_reference(
        model, "auto", persistent_buffers=persistent_buffers_needed(inventory, loaded)
    )
    seconds["reference"] = time.perf_counter() - start
    start = time.perf_counter()
    state_findings, summary = computed_state(inventory, reference, reason, on_meta)
    findings += state_findings
    summaries.append(summary)
    written: list[Finding] = []
    missing: list[Finding] = []
    ties = [
        t
        for t in tie_module.declared(model)
        if t.target in inventory and t.source in inventory and not {t.target, t.source} & on_meta
    ]
    tie_targets = {t.target for t in ties}
    state = [e for e in inventory.state_entries if e.name not in on_meta]
    with torch.no_grad():
        for entry in state:
            if entry.name in loaded:
                if entry.name in record.writes or entry.name in record.replaced:
                    written.append(
                        checks.check_predicted_write(
                            entry,
                            record.writes.get(entry.name, []),
                            entry.name in record.replaced,
                            record.where.get(entry.name),
                        )
                    )
            elif entry.name not in tie_targets:
                value = reference.values.get(entry.name) if reference is not None else None
                missing.append(checks.check_missing_key(entry, inventory.tensor(entry.name), value))
    tied = tied_weights(inventory, ties, None, lambda name: name if name in loaded else None)
    findings += written + missing + tied
    kept = sum(1 for e in state if e.name in loaded)
    note = f"predicted: {kept} loaded, {len(written)} written after loading by weight initialization"
    if quantized:
        note += (
            f"; a {quantized}-quantized checkpoint: predicted as the model before quantization (no backend needed): the "
            "weights its quantizer replaces are not predicted, non-persistent buffers and everything else are"
        )
    summaries.append(check_summary(Check.CHECKPOINT_FIDELITY, kept, written, note))
    if mode in ("header", "saved"):
        summaries.append(
            check_summary(Check.MISSING_KEY, len(missing), missing, SAVED_ASSUMPTION if mode == "saved" else "")
        )
    else:
        summaries.append(
            CheckSummary(
                Check.MISSING_KEY.value,
                False,
                reason="no checkpoint header: every key of the model's state dict assumed present",
            )
        )
    summaries.append(check_summary(Check.TIED_WEIGHTS, len(ties), tied))
    predicted = [
        dataclasses.replace(f, predicted=True, detail=f"predicted: {f.detail}")
        for f in located(findings, reference, record.where)
    ]
    seconds["checks"] = time.perf_counter() - start
    return AuditReport(
        model=source.name,
        model_class=type(model).__name__,
        checkpoint=SAVED_ASSUMPTION if mode == "saved" else source.header_from,
        findings=tuple(sorted(predicted, key=lambda f: (not f.failing, f.tensor))),
        checks=tuple(summaries),
        versions=versions(),
        seconds=seconds,
        mode="scan",
        revision=source.revision,
        fetched_bytes=source.fetched_bytes,
        method=WEIGHTLESS_METHOD.format(
            keys={
                "header": "keys, shapes and dtypes from the checkpoint's safetensors headers",
                "saved": "the keys this code's save_pretrained writes (its declared ties dropped)",
            }.get(mode, "every key of the model's own state dict")
        ),
    )


SAVED_ASSUMPTION = "no checkpoint headers: assumed the keys this code's save_pretrained writes (declared ties dropped)"

OVER_MEMORY_HINT = (
    "the model's code allocates this much while a weightless load builds it (on the CPU, outside the meta "
    "device): audit a full load instead (loadguard audit), or raise --memory-limit"
)

__all__ = ["KEYS", "OVER_MEMORY_HINT", "SAVED_ASSUMPTION", "scan", "scan_with_model"]
