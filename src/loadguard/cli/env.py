"""``loadguard env``: versions and a measured self-test, paste-ready for bug reports."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import platform
import tempfile
import time

import click

from ._common import ExitCode, emit, quiet_transformers
from ._options import format_option

# distribution -> module to import (an installed package that fails to import is reported as broken)
_PACKAGES = {
    "loadguard": "loadguard",
    "torch": "torch",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "safetensors": "safetensors",
    "tokenizers": "tokenizers",
    "rich": "rich",
    "click": "click",
    "pillow": "PIL",
}


def _version(distribution: str, module: str) -> str:
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    try:
        importlib.import_module(module)
    except Exception as error:
        return f"{version} (fails to import: {type(error).__name__}: {error})"
    return version


def self_test() -> dict:
    """Load a zoo model whose non-persistent buffers have no _init_weights branch, under poison, and
    compare them with the model built in memory: does the installed transformers preserve them?"""
    start = time.perf_counter()
    try:
        import torch
        from transformers import AutoModelForCausalLM

        from .. import zoo
        from .._hf import poison

        quiet_transformers()
        with tempfile.TemporaryDirectory() as folder:
            path = zoo.build("np_buffer", f"{folder}/np_buffer")
            truth = dict(zoo.build_model("np_buffer").named_buffers(remove_duplicate=False))
            with poison():
                model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
            loaded = dict(model.named_buffers(remove_duplicate=False))
            broken = sorted(
                k for k, v in truth.items() if loaded[k].device.type == "meta" or not torch.equal(loaded[k], v)
            )
    except Exception as error:
        from .._infra import import_failure

        broken = import_failure(error)
        return {
            "ran": False,
            "reason": f"{broken.message}. Hint: {broken.hint}" if broken else f"{type(error).__name__}: {error}",
            "seconds": round(time.perf_counter() - start, 2),
        }
    return {
        "ran": True,
        "preserves_non_persistent_buffers": not broken,
        "checked": len(truth),
        "broken": broken,
        "seconds": round(time.perf_counter() - start, 2),
    }


@click.command()
@format_option("json")
def env(fmt):
    """Versions, and whether this transformers keeps non-persistent buffers through from_pretrained."""
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    versions.update({name: _version(name, module) for name, module in _PACKAGES.items()})
    try:
        import torch

        # the build, not only the distribution's version: 2.14.1+cu130 and 2.14.1+cpu behave differently (memory, kernels)
        versions["torch build"] = (
            f"{torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU'})"
        )
        versions["cuda"] = torch.version.cuda if torch.cuda.is_available() else "not available"
    except Exception:
        versions["cuda"] = "unknown"
    test = self_test()
    if fmt == "json":
        emit(json.dumps({"versions": versions, "self_test": test}, indent=2))
        return ExitCode.CLEAN
    for key, value in versions.items():
        emit(f"- {key}: {value}")
    if not test["ran"]:
        emit(f"- self-test: could not run ({test['reason']})")
    elif test["preserves_non_persistent_buffers"]:
        emit(
            f"- non-persistent buffers survive from_pretrained: yes ({test['checked']} of {test['checked']} intact; measured in {test['seconds']} s)"
        )
    else:
        emit(
            f"- non-persistent buffers survive from_pretrained: NO ({len(test['broken'])} of {test['checked']} "
            f"came out uninitialized: {', '.join(test['broken'])}; measured in {test['seconds']} s)"
        )
    return ExitCode.CLEAN
