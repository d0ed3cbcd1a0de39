"""Every model class the installed transformers registers in its auto mappings, scanned weightless from its model
type's default config: ``loadguard scan --native [--match PATTERN]``.

Each class is built from ``AutoConfig.for_model(model_type)``, shrunk where the config allows it without changing
the structure (at most 2 layers of each kind, 4 experts routing to 2; the per-layer lists that go with them cut to
match) and full size otherwise, then scanned (``keys="complete"``: "the checkpoint holds every key") in a child
forked for it alone (:mod:`loadguard._infra.forks`). A row per class: clean, the predicted failures (with the line of
``_init_weights`` that wrote a loaded tensor, where the scan can tell), or why it could not be constructed.
"""

from __future__ import annotations

import copy
import fnmatch
from dataclasses import dataclass
from typing import Any

from .._infra import cell, code
from ..errors import LoadguardError
from ..executors import resolve
from ..report import failing
from .scanning import scan
from .scanning import scan as _scan_module
from .warmup import warm

LAYER_COUNTS = (
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "encoder_layers",
    "decoder_layers",
    "num_encoder_layers",
    "num_decoder_layers",
    "depth",
    "num_blocks",
)
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
ROUTED_COUNTS = (
    "num_experts_per_tok",
    "moe_topk",
    "num_experts_per_token",
)  # not top_k: a generation setting on 4.x configs
MAX_LAYERS, MAX_EXPERTS, MAX_ROUTED = 2, 4, 2


@dataclass(frozen=True)
class NativeClass:
    model_type: str
    class_name: str
    tasks: tuple[str, ...]
    """The auto mappings that name it (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` ...)."""

    @property
    def label(self) -> str:
        return f"{self.class_name} ({self.model_type})"


def classes(match: str | None = None, *, tasks: str | None = None) -> list[NativeClass]:
    """Every (model type, class) of the installed transformers' auto mappings; ``match`` a glob or a substring of the
    class name or model type (``*ForCausalLM``, ``llama*``, ``ForCausalLM``), ``tasks`` a glob on the mapping
    (``*CAUSAL_LM*``)."""
    import transformers.models.auto.modeling_auto as auto

    found: dict[tuple[str, str], set[str]] = {}
    for mapping_name, mapping in vars(auto).items():
        if not (mapping_name.startswith("MODEL_") and mapping_name.endswith("_MAPPING_NAMES")) or not isinstance(
            mapping, dict
        ):
            continue
        if tasks and not fnmatch.fnmatch(mapping_name, tasks):
            continue
        for model_type, names in mapping.items():
            for class_name in names if isinstance(names, (list, tuple)) else [names]:
                if isinstance(class_name, str):
                    found.setdefault((model_type, class_name), set()).add(mapping_name)
    out = [
        NativeClass(model_type, name, tuple(sorted(where)))
        for (model_type, name), where in sorted(found.items(), key=lambda item: (item[0][1], item[0][0]))
    ]
    if match:
        out = [c for c in out if matches(c.class_name, match) or matches(c.model_type, match)]
    return out


def matches(name: str, pattern: str) -> bool:
    """``pattern`` as users type it: a glob (``*ForCausalLM``, ``llama*``), or, without glob characters, a substring
    (``ForCausalLM``)."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(name, pattern)
    return pattern in name


def shrink(config: Any) -> list[str]:
    """Fewer layers and experts, same structure, in place (sub-configs too); returns what changed."""
    changed: list[str] = []
    seen: set[int] = set()

    def visit(target: Any, prefix: str) -> None:
        if id(target) in seen:
            return
        seen.add(id(target))
        attributes = vars(target)
        for names, limit in ((LAYER_COUNTS, MAX_LAYERS), (EXPERT_COUNTS, MAX_EXPERTS), (ROUTED_COUNTS, MAX_ROUTED)):
            for name in names:
                value = attributes.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > limit:
                    setattr(target, name, limit)
                    changed.append(f"{prefix}{name} {value}->{limit}")
        layers = attributes.get("num_hidden_layers")
        for name, value in list(attributes.items()):
            if (
                isinstance(value, list)
                and isinstance(layers, int)
                and len(value) > layers
                and name.endswith(("layer_types", "layers_block_type", "block_types"))
            ):
                setattr(target, name, value[:layers])
        for name, value in list(attributes.items()):
            if hasattr(value, "to_dict") and hasattr(value, "model_type") and not isinstance(value, type):
                visit(value, f"{prefix}{name}.")

    visit(config, "")
    return changed


def _class(native: NativeClass):
    import transformers

    return getattr(transformers, native.class_name)


def scan_class(native: NativeClass, shrunk: bool = True) -> dict:
    """One class's row (JSON-able): its scan report, or why it could not be built."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(native.model_type)
    except Exception as error:
        return {
            "model": native.label,
            "scanned": False,
            "error": f"no default config: {type(error).__name__}: {error}",
            "hint": "",
            "fixes": [],
        }
    attempts = [True, False] if shrunk else [False]
    last = ""
    for shrink_it in attempts:
        trial = copy.deepcopy(config)
        changed = shrink(trial) if shrink_it else []
        if shrink_it and not changed:
            continue
        try:
            report = scan(trial, model_class=_class(native), keys="complete")
        except LoadguardError as error:
            last = error.message
            continue
        except Exception as error:
            last = f"{type(error).__name__}: {error}"
            continue
        return {
            "scanned": True,
            **report.to_dict(),
            "model": native.label,
            "shrunk": changed,
            "tasks": list(native.tasks),
        }
    return {
        "model": native.label,
        "scanned": False,
        "error": f"could not construct: {last.splitlines()[0] if last else 'unknown'}",
        "hint": "",
        "fixes": [],
    }


def _scan_in_child(native: NativeClass) -> dict:
    import transformers

    transformers.logging.set_verbosity_error()
    return scan_class(native)


def _prepare(natives: list[NativeClass]):
    def prepare() -> None:
        import transformers

        for native in natives:  # each class's module imported once, before any fork: a child pays its scan only
            try:
                _class(native)
            except Exception:
                pass  # the child says why
        transformers.logging.set_verbosity_error()

        warm()  # a first scan's work (imports, transformers' tables, the self-check) done here, not in every child

    return prepare


def scan_all(
    natives: list[NativeClass],
    *,
    jobs: int = 1,
    timeout: float = 300.0,
    memory_limit: int | None = None,
    executor=None,
) -> list[dict]:
    """Every class in a child forked for it alone, ``jobs`` at a time (each stopped past ``timeout`` seconds or
    ``memory_limit`` bytes added: a row saying so); ``executor`` where (:func:`loadguard.executors.resolve`)."""

    outcomes = resolve(executor).map(
        _scan_in_child, natives, jobs=jobs, timeout=timeout, memory_limit=memory_limit, prepare=_prepare(natives)
    )
    rows = []
    for native, outcome in zip(natives, outcomes):
        hint = _scan_module.OVER_MEMORY_HINT if outcome.killed == "memory" else ""
        rows.append(
            outcome.value
            if outcome.ok
            else {"model": native.label, "scanned": False, "error": outcome.error, "hint": hint, "fixes": []}
        )
    return rows


def markdown(rows: list[dict]) -> str:
    """The failing classes as a Markdown report to paste into an upstream issue: tensor, status, class, where."""

    lines = ["| class | tensor | status | what happens |", "|---|---|---|---|"]
    for row in rows:
        if not row.get("scanned"):
            continue
        for finding in failing(row["findings"]):
            detail = finding["detail"].replace("predicted: ", "")
            lines.append(
                f"| {cell(row['model'])} | {code(finding['tensor'], table=True)} | {cell(finding['status'])} | "
                f"{cell(detail)} |"
            )
    if len(lines) == 2:
        lines.append("| (none) | | | every class predicted clean |")
    return "\n".join(lines)


__all__ = ["NativeClass", "classes", "markdown", "scan_all", "scan_class", "shrink"]
