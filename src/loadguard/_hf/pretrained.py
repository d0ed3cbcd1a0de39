"""Loading with ``from_pretrained`` as a user would, turning every way it fails into a typed error."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .. import workarounds as registry
from .._files import Checkpoint, failure, hub_offline
from .._infra import import_failure, procs
from ..errors import (
    CheckpointError,
    EagerAttentionNeededError,
    InvalidOptionError,
    LoadguardError,
    ModelConfigError,
    ModelNotFoundError,
    NoWeightsError,
    RemoteCodeImportError,
    RemoteCodeNotTrustedError,
    fixes_hint,
)
from . import loading_info
from .noise import collected

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(value: Any) -> Any:
    """``"auto"``, a dtype name or a ``torch.dtype``; raises :class:`InvalidOptionError` otherwise."""
    if value is None or isinstance(value, torch.dtype):
        return value
    name = str(value).replace("torch.", "")
    if name in DTYPES:
        return DTYPES[name]
    raise InvalidOptionError(f"{value!r} is not a dtype loadguard loads with", f"use one of: {', '.join(DTYPES)}")


def check_device(device: str | None) -> None:
    if device is None or device in ("cpu", "auto"):
        return
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise InvalidOptionError(f"{device!r} is not a device", "use cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise InvalidOptionError(
            f"--device {device} was asked for but this machine has no usable CUDA GPU", "use --device cpu"
        )
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise InvalidOptionError(
            f"{device} does not exist: this machine has {torch.cuda.device_count()} GPU(s)", "use cuda:0"
        )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise InvalidOptionError("--device mps was asked for but MPS is not available here", "use --device cpu")


def check_checkpoint(path: str | os.PathLike) -> None:
    """Before loading a local folder: its weights are readable and complete (headers, sizes, shards).

    A folder without weights passes: ``from_pretrained`` says what it expected there.
    """

    if not Path(path).is_dir():
        return
    try:
        Checkpoint.open(path).close()
    except CheckpointError as error:
        if "holds no checkpoint" not in error.message:
            raise


def resolve_class(auto_class: Any, config: dict) -> Any:
    """The class to call ``from_pretrained`` on: the one given, else the auto class whose remote-code target is
    the architecture the config names, else its causal-LM entry, else the native class the config names, else
    AutoModel. (Taking the first ``auto_map`` entry picked FalconForSequenceClassification for a causal LM.)"""
    import transformers

    if auto_class is not None and not isinstance(auto_class, str):
        return auto_class
    if isinstance(auto_class, str):
        cls = getattr(transformers, auto_class, None)
        if cls is None or not hasattr(cls, "from_pretrained"):
            raise InvalidOptionError(
                f"transformers has no model class called {auto_class!r}", "use e.g. AutoModel, AutoModelForCausalLM"
            )
        return cls
    auto_map = config.get("auto_map") or {}
    if not isinstance(auto_map, dict):
        raise ModelConfigError(
            f"the config's auto_map is a {type(auto_map).__name__}, not a mapping of auto classes to code",
            "fix auto_map in config.json",
        )
    architectures = config.get("architectures") or []
    if isinstance(architectures, str):
        architectures = [architectures]
    model_keys = [k for k in auto_map if k.startswith("AutoModel") and hasattr(transformers, k)]
    removed = [k for k in auto_map if k.startswith("AutoModel") and not hasattr(transformers, k)]
    if removed and not model_keys:
        error = ModelConfigError(
            f"the model's auto_map names only auto classes this transformers removed ({', '.join(removed)}): "
            f"transformers {transformers.__version__} has nothing to load it with",
            "name the auto class yourself (--auto-class, model_class=)",
        )
        raise name_workarounds(error, [w.name for w in registry.matching(error)])
    for architecture in architectures[:1]:  # the auto class whose target is the architecture the config names
        for key in sorted(model_keys, key=lambda k: k == "AutoModel"):
            target = auto_map[key] if isinstance(auto_map[key], str) else auto_map[key][0]
            if target.split("--")[-1].endswith("." + architecture):
                return getattr(transformers, key)
    for preferred in ("AutoModelForCausalLM", "AutoModel"):
        if preferred in model_keys:
            return getattr(transformers, preferred)
    if model_keys:
        return getattr(transformers, sorted(model_keys)[0])
    if architectures and hasattr(transformers, architectures[0]):
        return getattr(transformers, architectures[0])
    return transformers.AutoModel


class BaseCall:
    """What the outermost ``PreTrainedModel.from_pretrained`` of a load did (see :func:`through_the_base`)."""

    def __init__(self, weightless: bool = False) -> None:
        self.depth = 0
        self.model: Any = None
        self.info: Any = None
        self.reached = False
        self.weightless = weightless
        """The outermost base call gets ``None`` for the path (a weightless load reads no file), while a model's own
        override above it saw the real folder (one that reads its generation config there still finds it)."""


@contextlib.contextmanager
def through_the_base(record: BaseCall) -> Iterator[BaseCall]:
    """Around a ``from_pretrained``: the outermost call that reaches ``PreTrainedModel.from_pretrained`` (directly, or
    from a model's own override that delegates with ``super().from_pretrained(...)`` and then adjusts the model) is
    asked for transformers' loading info and hands its caller the model alone, as that caller expects; ``record`` keeps
    the model and the info. Loads nested inside it (a sub-model a constructor loads) pass through untouched."""
    from transformers import PreTrainedModel

    original = PreTrainedModel.__dict__["from_pretrained"]

    def from_pretrained(cls, *args, **kwargs):
        outer = record.depth == 0
        asked = bool(kwargs.get("output_loading_info", False))
        if outer:
            kwargs["output_loading_info"] = True
            if record.weightless:
                if args:
                    args = (None, *args[1:])
                elif "pretrained_model_name_or_path" in kwargs:
                    kwargs["pretrained_model_name_or_path"] = None
        record.depth += 1
        try:
            result = original.__func__(cls, *args, **kwargs)
        finally:
            record.depth -= 1
        if not outer:
            return result
        record.reached = True
        record.model, record.info = loading_info.split(result)
        return result if asked else record.model

    PreTrainedModel.from_pretrained = classmethod(from_pretrained)
    try:
        yield record
    finally:
        PreTrainedModel.from_pretrained = original


def from_pretrained(cls: Any, path: str | os.PathLike, *, active_workarounds: tuple[str, ...] = (), **kwargs: Any):
    """``cls.from_pretrained(path, **kwargs)`` returning the model, with transformers' loading info kept on it
    (:mod:`loadguard._hf.loading_info`: the evidence of what was not loaded on purpose); every failure becomes a
    :class:`LoadguardError`, naming the registered workarounds that fix it (other than those in ``active_workarounds``).
    A model class whose own ``from_pretrained`` delegates to transformers' sees the return value it expects."""

    kwargs.pop(
        "output_loading_info", None
    )  # asked for on the base call; the caller gets the model (its info kept on it)
    try:
        with collected() as warned, through_the_base(BaseCall()) as base, procs.exits_refused(f"loading {path}"):
            result = cls.from_pretrained(_absolute(path), **kwargs)
    except LoadguardError:
        raise
    except Exception as error:
        raise translate(error, path, active_workarounds, device_map=kwargs.get("device_map")) from error
    model, info = loading_info.split(result)
    _named_as_given(model, str(path))
    loading_info.remember(model, info if info is not None else base.info)
    model.loadguard_load_warnings = tuple(warned)  # what transformers and the model's code warned while it loaded
    return model


def _named_as_given(model: Any, path: str) -> None:
    """The name a plain ``from_pretrained(path)`` gives the model (``name_or_path``: what the user passed), where
    :func:`_absolute` passed the folder's absolute path."""
    if _absolute(path) == path:
        return
    for owner in (model, getattr(model, "config", None)):
        if owner is not None and getattr(owner, "name_or_path", None) == _absolute(path):
            with contextlib.suppress(AttributeError, TypeError):
                owner.name_or_path = path


def _absolute(path: str | os.PathLike) -> str:
    """A local folder as an absolute path: the model's code may ``os.chdir`` while it is imported, before transformers
    reads the weights (a relative folder then points elsewhere); a Hub id as it is."""
    text = str(path)
    return os.path.abspath(text) if not os.path.isabs(text) and os.path.isdir(text) else text


def translate(
    error: Exception, path: Any, active_workarounds: tuple[str, ...] = (), device_map: Any = None
) -> LoadguardError:
    """Say what a failed ``from_pretrained`` (or construction) means and what to do about it."""
    import transformers

    text = str(error).split("\n")[0]
    broken = import_failure(error)
    if broken is not None:
        return broken
    if device_map is not None and "is on the meta device, we need a `value` to put in on" in text:
        layout = (
            device_map
            if isinstance(device_map, str)
            else ", ".join(f"{k or '(root)'}: {v}" for k, v in device_map.items())
        )
        return LoadguardError(
            f"transformers {transformers.__version__} cannot load {path} with this device_map ({layout}): a limitation of "
            f"its dispatch, not of the model ({text})",
            "give every top-level module its own device (no '' entry next to per-module entries), or use "
            "--device-map auto with --max-memory",
        )
    if "Kernels are not available" in text:  # transformers >= 5.25 kernelizes every load unless told not to
        return LoadguardError(
            f"transformers {transformers.__version__} loads with hub kernels by default and the kernels package is missing "
            f"or of another version ({text})",
            "install it (pip install 'kernels>=0.19.1,<0.20': transformers depends on it), or turn hub kernels off: "
            "USE_HUB_KERNELS=NO in the environment, or from_pretrained(..., use_kernels=False) / loadguard.load(..., use_kernels=False)",
        )
    backend = re.search(r"`pip install ([^`]+)`", text)
    if isinstance(error, ImportError) and backend and "quantiz" in text.lower():
        names = plain_packages(backend.group(1))
        install = (
            shlex.join(["pip", "install", *names])
            if names
            else "install the backend its message names (read it: it is not repeated here as a command)"
        )
        return LoadguardError(
            f"loading {path} needs a quantization backend that is not installed ({text})",
            f"{install}; or predict the load without it: loadguard scan (no weight is read, no backend needed)",
        )
    if isinstance(error, ValueError) and 'attn_implementation="eager"' in str(error):  # transformers' own refusal
        return EagerAttentionNeededError(
            f"transformers {transformers.__version__} refuses the attention kernel asked for {path} ({text})"
        )
    frame = _remote_code_frame(error)
    matched = [w.name for w in registry.matching(error)]
    if frame is not None or matched:
        where = (
            f"in {frame[0]}, line {frame[1]}" if frame is not None else "(it was written for an older transformers)"
        )
        translated = RemoteCodeImportError(
            f"the model's own code failed {where}: {type(error).__name__}: {text}",
            "fix the model's code at that line, or pin the torch/transformers versions it was written for",
        )
        return name_workarounds(translated, matched, active_workarounds)
    if (
        "does not recognize this architecture" in text
        or "Unrecognized model" in text
        or "model type" in text
        and "not" in text
    ):
        return ModelConfigError(
            f"the config in {path} names an architecture this transformers does not know ({text})",
            "upgrade transformers, or pass the model's remote code with --trust-remote-code",
        )
    if "trust_remote_code" in text:
        return RemoteCodeNotTrustedError(
            f"{path} needs its own code to load and it was not trusted", "pass --trust-remote-code if you trust it"
        )
    if isinstance(error, OSError) and (
        "offline" in text.lower() or "connect" in text.lower() or "couldn't" in text.lower()
    ):
        return failure(path, error, hub_offline())
    if isinstance(error, OSError) and "is not a local folder and is not a valid model identifier" in text:
        return ModelNotFoundError(
            f"{path} is neither a local folder nor a model on the Hugging Face Hub ({text})",
            "check the path or the id; for a private or gated model, log in (hf auth login) or set HF_TOKEN",
        )
    if "no file named" in text and "found in directory" in text:
        return NoWeightsError(str(path), text)
    if "safetensors" in text.lower() or "header" in text.lower() or "deserializ" in text.lower():
        return LoadguardError(
            f"the weights in {path} cannot be read ({text})",
            "the checkpoint is corrupt or truncated: download or save it again",
        )
    return LoadguardError(
        f"from_pretrained failed on {path}: {type(error).__name__}: {text}",
        "set LOADGUARD_DEBUG=1 to see the traceback",
    )


_PACKAGE = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,-]+\])?(?:(?:==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!]+)?$"
)


def plain_packages(text: str) -> list[str] | None:
    """The distributions a message asks to install, when it names nothing but plain requirements (``bitsandbytes``,
    ``auto-gptq>=0.4``); None when it holds anything else (shell text, a URL, an option): a hint never repeats that as a
    command."""
    words = text.split()
    if not words or not all(_PACKAGE.match(word) for word in words):
        return None
    return words


def name_workarounds(error: LoadguardError, matched: list[str], active: tuple[str, ...] = ()) -> LoadguardError:
    """Point ``error`` at the registered workarounds whose declared failure it is."""
    new = [name for name in matched if name not in active]
    if new:
        error.fixes = tuple(new)
        error.hint = fixes_hint(new, "api")
    elif matched:
        error.hint = (
            f"workaround(s) {', '.join(matched)} were applied and the code still fails this way: "
            "fix the model's code, or pin the versions it was written for (LOADGUARD_DEBUG=1 shows the traceback)"
        )
    return error


def _remote_code_frame(error: Exception) -> tuple[str, int] | None:
    """(file, line) of the innermost frame inside a model's remote code, if the error came from there."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if "transformers_modules" in frame.filename:
            found = (Path(frame.filename).name, frame.lineno)
    return found
