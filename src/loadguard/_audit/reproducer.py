"""Standalone reproducers: for each kind of finding an audit made, a script that uses only torch and transformers (and
safetensors, which transformers loads checkpoints with), loads the model the same way, and exits 1 showing the wrong
tensors, 0 once upstream or the model is fixed: what a user attaches to an upstream issue. It never imports loadguard.

Leftover memory is made deterministic the way loadguard does it (``torch.use_deterministic_algorithms``: NaN for
floats, INT_MAX for ints), so the script fails the same way on every run.

Example::

    written = write_reproducers(report, "./repro", model="./my-model", auto_class="AutoModelForCausalLM",
                                from_pretrained={"trust_remote_code": True})
    # ./repro/reproduce_non_persistent_buffer.py ...: python it, exit 1 until fixed
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..report import AuditReport, Finding

_PRELUDE = '''"""Reproduces what loadguard found when loading {model} with transformers {transformers} (torch {torch}):
{summary}

Uses only torch and transformers. Exit 1 while it is wrong, 0 once it is fixed.{needs}

    python {script} [MODEL]
"""

import sys

import torch
import transformers

MODEL = sys.argv[1] if len(sys.argv) > 1 else {model!r}
AUTO_CLASS = {auto_class!r}
FROM_PRETRAINED = {kwargs}
TENSORS = {tensors}


def load():
    """from_pretrained as the report's load did it; leftover memory is NaN / INT_MAX (deterministic), not chance."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return getattr(transformers, AUTO_CLASS).from_pretrained(MODEL, **FROM_PRETRAINED)
    finally:
        torch.use_deterministic_algorithms(False)


def tensor(model, name):
    """A parameter, buffer or plain tensor attribute by its dotted name."""
    owner, _, leaf = name.rpartition(".")
    return getattr(model.get_submodule(owner) if owner else model, leaf)


def show(value):
    flat = value.detach().reshape(-1)[:6]
    return f"{{flat.tolist()}}{{' ...' if value.numel() > 6 else ''}} ({{value.dtype}}, {{tuple(value.shape)}})"


def differs(got, expected):
    if got.shape != expected.shape:
        return True
    if got.dtype.is_floating_point:
        return not torch.allclose(got.float().cpu(), expected.float().cpu(), rtol=1e-5, atol=1e-6, equal_nan=False)
    return not torch.equal(got.cpu(), expected.cpu())

'''

_CHECKS = {
    "non_persistent_buffer": '''
def reference():
    """The model as its __init__ computes it: buffers real, parameters on meta (no weights, no checkpoint)."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, parameter):
        if parameter is not None:
            parameter = torch.nn.Parameter(parameter.to("meta"), requires_grad=parameter.requires_grad)
        register(module, name, parameter)

    config = transformers.AutoConfig.from_pretrained(MODEL, trust_remote_code=FROM_PRETRAINED.get("trust_remote_code", False))
    torch.nn.Module.register_parameter = on_meta
    try:
        return getattr(transformers, AUTO_CLASS).from_config(config, trust_remote_code=FROM_PRETRAINED.get("trust_remote_code", False))
    finally:
        torch.nn.Module.register_parameter = register


def wrong():
    loaded, built = load(), reference()
    out = []
    for name in TENSORS:
        got, expected = tensor(loaded, name), tensor(built, name)
        if differs(got, expected):
            out.append(f"{name}: from_pretrained leaves {show(got)}; __init__ computes {show(expected)}")
    return out
''',
    "meta_leftover": """
def wrong():
    loaded = load()
    return [f"{name}: still on the meta device after from_pretrained: it has no value" for name in TENSORS if tensor(loaded, name).device.type == "meta"]
""",
    "missing_key": """
def wrong():
    loaded = load()
    out = []
    for name in TENSORS:
        value = tensor(loaded, name)
        leftover = torch.isnan(value).any() if value.dtype.is_floating_point else (value == torch.iinfo(value.dtype).max).any()
        if bool(leftover):
            out.append(f"{name}: not in the checkpoint and never initialized: from_pretrained leaves {show(value)}")
    return out
""",
    "checkpoint_fidelity": """
CHECKPOINT_KEYS = {keys}


def checkpoint(key):
    from pathlib import Path

    from safetensors import safe_open

    for file in sorted(Path(MODEL).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            if key in handle.keys():
                return handle.get_tensor(key)
    raise SystemExit(f"{{key}} is in no *.safetensors file of {{MODEL}}")


def wrong():
    loaded = load()
    out = []
    for name in TENSORS:
        got = tensor(loaded, name)
        expected = checkpoint(CHECKPOINT_KEYS.get(name, name)).to(got.dtype)
        if differs(got, expected):
            out.append(f"{{name}}: from_pretrained leaves {{show(got)}}; the checkpoint holds {{show(expected)}} (overwritten after loading)")
    return out
""",
    "tied_weights": """
TIED_TO = {ties}


def wrong():
    loaded = load()
    out = []
    for name in TENSORS:
        got, source = tensor(loaded, name), tensor(loaded, TIED_TO[name])
        if got is not source and differs(got, source):
            out.append(f"{{name}}: declared tied to {{TIED_TO[name]}} but a different tensor with other values: {{show(got)}} vs {{show(source)}}")
    return out
""",
}

_MAIN = """

if __name__ == "__main__":
    problems = wrong()
    for line in problems:
        print(line)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: " + (f"{len(problems)} tensor(s) wrong" if problems else "fixed: every tensor is right"))
    sys.exit(1 if problems else 0)
"""


def supported(finding: Finding) -> bool:
    return finding.failing and finding.check in _CHECKS


def _checkpoint_key(finding: Finding) -> str:
    match = re.search(r"checkpoint '([^']+)'", finding.detail)
    return match.group(1) if match else finding.tensor


def _tie_source(finding: Finding) -> str | None:
    match = re.search(r"tied to (\S+?)[ ,(]", finding.detail + " ")
    return match.group(1) if match else None


def write_reproducers(
    report: AuditReport,
    folder: str | os.PathLike,
    *,
    model: str,
    auto_class: str,
    from_pretrained: dict[str, Any],
    workarounds=(),
) -> list[Path]:
    """One script per check the report's failures come from, in ``folder`` (created); returns their paths. Findings of
    a kind no script reproduces get none. ``workarounds``: those loadguard applied for the load; the script applies none
    and says so (without them it stops where the plain load does)."""
    versions = report.versions
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    kwargs = {k: v for k, v in from_pretrained.items() if isinstance(v, (str, int, float, bool, type(None)))}
    written = []
    for check in dict.fromkeys(f.check for f in report.failures if supported(f)):
        findings = [f for f in report.failures if f.check == check]
        if check == "tied_weights":
            findings = [f for f in findings if _tie_source(f)]
            if not findings:
                continue
        tensors = [f.tensor for f in findings]
        script = f"reproduce_{check}.py"
        summary = f"{len(tensors)} tensor(s) fail {check}: " + ", ".join(
            f"{f.tensor} ({f.status})" for f in findings[:6]
        )
        text = _PRELUDE.format(
            model=str(model),
            transformers=versions.get("transformers", "?"),
            torch=versions.get("torch", "?"),
            summary=summary,
            script=script,
            auto_class=auto_class,
            kwargs=repr(kwargs),
            tensors=repr(tensors),
            needs=(
                f"\nThis model needed loadguard's workarounds {', '.join(workarounds)} to load with these versions; this script applies\n"
                "none, so until the model's code is updated it stops where a plain from_pretrained does."
            )
            if workarounds
            else "",
        )
        body = _CHECKS[check]
        if check == "checkpoint_fidelity":
            body = body.format(keys=repr({f.tensor: _checkpoint_key(f) for f in findings}))
        elif check == "tied_weights":
            body = body.format(ties=repr({f.tensor: _tie_source(f) for f in findings}))
        path = target / script
        path.write_text(text + body + _MAIN)
        written.append(path)
    return written


__all__ = ["supported", "write_reproducers"]
