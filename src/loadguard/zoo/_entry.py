"""What a zoo entry is: how it is built, and what a broken load does to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..report import FixStatus, Status
from ..workarounds import get


@dataclass(frozen=True)
class ExpectedFinding:
    """A tensor that a transformers v5 load leaves wrong, and how (a loadguard status)."""

    tensor: str
    status: str  # "uninitialized" | "on_meta" | "overwritten"


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    summary: str
    failure_mode: str | None = None
    """The letter of the failure mode in loadguard's background notes (a-e), None for clean models."""
    config: dict[str, Any] = field(default_factory=dict)
    expected: tuple[ExpectedFinding, ...] = ()
    save_non_persistent_buffers: bool = False
    drop_keys: tuple[str, ...] = ()
    shards: int = 1
    prompts: tuple[str, ...] = ("describe what you see .",)
    image_sizes: tuple[tuple[int, int], ...] = ()
    """(width, height) of the demo images each prompt's ``<image>`` placeholders take, in order."""
    failures: tuple[tuple[str, str], ...] = ()
    """Code written for transformers 4.x: ``(workaround, exception)`` in the order a plain ``from_pretrained`` meets
    them on a transformers that lacks what each workaround gives back."""
    runs_into: tuple[tuple[str, str, str], ...] = ()
    """Code written for transformers 4.x that loads on 5.x and fails when it runs: ``(workaround, stage, exception)``,
    the stage ``forward`` or ``generate`` where a plain call on inputs built from the config meets it on transformers 5."""
    config_json: dict[str, Any] = field(default_factory=dict)
    """Keys its config.json holds as an older transformers wrote them."""
    config_json_drop: tuple[str, ...] = ()
    submodel: tuple[str, str, str] | None = None
    """(attribute, subfolder, config field): a sub-model saved with ``save_pretrained`` into a folder of its own, whose
    path the config names (a constructor that loads it with ``from_pretrained``)."""
    fix: str = FixStatus.FIXED
    """What ``loadguard fix`` does with it on transformers 5: ``fixed`` (a proven patch), ``clean`` (nothing to change),
    ``partly: why`` (a proven patch for some tensors, the rest refused with the reason), or ``not fixable: why`` (what
    only a person can change; no patch is written)."""
    dtype: str | None = None
    """The dtype it is built, saved and loaded in (``"bfloat16"``: constructed under that default dtype, as
    ``from_pretrained(dtype=...)`` constructs it; its config.json says so); None: float32."""
    config_after: dict[str, Any] = field(default_factory=dict)
    """Config fields set after the config is constructed (as transformers' own tests switch off a setting that a
    config's ``__init__`` forces): the model is built, and its config.json saved, with them."""

    @property
    def workarounds(self) -> tuple[str, ...]:
        """The ``before_import`` workarounds its code may need to import and construct (those the running
        transformers / torch makes unnecessary change nothing)."""
        return tuple(name for name, _ in self.failures)

    @property
    def needed_workarounds(self) -> tuple[str, ...]:
        """Those the running transformers / torch lacks what they give back for: the ones its load needs here."""

        return tuple(name for name in self.workarounds if not get(name).is_native())

    @property
    def load_error(self) -> str | None:
        """The exception a plain ``from_pretrained`` of this entry raises here (None: it loads, e.g. transformers
        4.x, or 5.25 for code that only needs ``transformers.modeling_attn_mask_utils``)."""
        needed = self.needed_workarounds
        return next((error for name, error in self.failures if name in needed), None)

    @property
    def takes_images(self) -> bool:
        return self.family == "lgminicpmv"

    @property
    def auto_class(self) -> str:
        return "AutoModelForCausalLM"

    def expected_for(self, num_hidden_layers: int) -> tuple[ExpectedFinding, ...]:
        """Expected findings for a model with that many layers: ``{layer}`` stands for every layer,
        ``{later_layer}`` for every layer but the first."""
        out = []
        for item in self.expected:
            if "{layer}" in item.tensor:
                layers, key = range(num_hidden_layers), "layer"
            elif "{later_layer}" in item.tensor:
                layers, key = range(1, num_hidden_layers), "later_layer"
            else:
                out.append(item)
                continue
            out.extend(ExpectedFinding(item.tensor.format(**{key: i}), item.status) for i in layers)
        return tuple(out)


TOY_NP = (
    ExpectedFinding("positions.table", Status.UNINITIALIZED),
    ExpectedFinding("positions.index", Status.UNINITIALIZED),
    ExpectedFinding("layers.{layer}.attn.causal_mask", Status.UNINITIALIZED),
)

__all__ = ["ExpectedFinding", "ZooEntry"]
