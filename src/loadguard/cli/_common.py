"""What the commands share: consoles, exit codes, the loading options and the load itself."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
from enum import IntEnum
from typing import Any

import click

from .. import _audit
from .._infra import styled, visible
from ..errors import InvalidOptionError, hint_for
from ._consoles import SETTINGS, stderr
from ._options import workaround_option, workarounds_from_option


class ExitCode(IntEnum):
    CLEAN = 0
    FINDINGS = 1
    COULD_NOT_RUN = 2
    PARTIAL = 3
    """Some models were checked and some could not be: the results are incomplete (findings or not)."""


SCHEMA_VERSION = 1
"""Of the JSON documents and rows the commands print: raised when a key changes meaning or goes away."""

_document: list = []  # the real stdout while a machine format keeps everything else off it
_started_in: list[str] = []  # the directory the command started in


def pin_directory() -> None:
    """At the start of a command: remember the working directory, and make ``$GITHUB_STEP_SUMMARY`` absolute, before
    any model code runs (code that calls ``os.chdir`` at import must not move where our output lands). Output options
    are resolved by click (``resolve_path``) when they are parsed."""
    _started_in[:] = [os.getcwd()]
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        os.environ["GITHUB_STEP_SUMMARY"] = os.path.abspath(summary)


def back_home() -> None:
    """Before anything is written or shown: back in the directory the command started in, should a model's code
    have moved (relative paths in SARIF, a baseline, a step summary are the user's)."""
    if _started_in and os.getcwd() != _started_in[0]:
        with contextlib.suppress(OSError):
            os.chdir(_started_in[0])


def emit(text: str) -> None:
    """Write our document (JSON, Markdown, a path) to stdout: the real one, even while a machine format sends
    whatever else writes to stdout (a model's own code, transformers) to stderr."""
    back_home()
    stream = _document[-1] if _document else sys.stdout
    stream.write(text + "\n")
    stream.flush()


@contextlib.contextmanager
def machine_output(active: bool):
    """With ``--format json|markdown``: stdout holds only our document. Anything else printed meanwhile (a model's
    ``print``, a C extension writing to file descriptor 1) goes to stderr; :func:`emit` writes to the real stdout."""
    if not active:
        yield
        return
    previous = sys.stdout
    previous.flush()
    try:
        on_descriptor = previous.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a captured stream (pytest's capsys): Python-level only
        on_descriptor = False
    saved = os.dup(1) if on_descriptor else None
    real = os.fdopen(saved, "w", closefd=False) if saved is not None else previous
    if saved is not None:
        os.dup2(2, 1)
    sys.stdout = sys.stderr
    _document.append(real)
    try:
        yield
    finally:
        _document.pop()
        sys.stdout.flush()
        sys.stdout = previous
        if saved is not None:
            real.flush()
            os.dup2(saved, 1)
            os.close(saved)


def streams_without_descriptor() -> dict[int, Any]:
    """The streams this command writes to (sys.stdout, sys.stderr, the machine document's stdout) that have no file
    descriptor: a Python-level capture (pytest's ``capsys``, click's ``CliRunner``, a notebook's). A child forked to run
    the model's code inherits a descriptor, not such a stream: what it writes there is relayed (:mod:`._limits`). By
    ``id``, which a forked child shares."""

    def captured(stream) -> bool:
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):
            return True
        return False

    return {id(s): s for s in (sys.stdout, sys.stderr, *_document) if captured(s)}


def streams_replaced(replacements: dict[int, Any]) -> None:
    """In a child: each of this command's streams whose ``id`` is in ``replacements`` is replaced by its value."""
    sys.stdout = replacements.get(id(sys.stdout), sys.stdout)
    sys.stderr = replacements.get(id(sys.stderr), sys.stderr)
    _document[:] = [replacements.get(id(s), s) for s in _document]


def report_error(error) -> None:
    """A :class:`loadguard.LoadguardError` as every command ends with one: ``Error:`` and, when there is one, ``Hint:``
    (worded for the CLI) on stderr."""

    stderr().print(
        styled("[bold red]Error:[/] {}", error.message), highlight=False
    )  # brackets are text: loadguard[ray]
    hint = hint_for(error, "cli")
    if hint:
        stderr().print(styled("[bold]Hint:[/] {}", hint), highlight=False)


def note(text: str) -> None:
    """A message that is not a result, a finding or an error (progress, what was written, what was kept back): on
    stderr, unless ``--quiet``."""
    if not SETTINGS["quiet"]:
        stderr().print(text, highlight=False)


def set_verbose(verbose: bool) -> None:
    """``--verbose``: transformers' warnings and progress bars are shown (see :func:`quiet_transformers`)."""
    SETTINGS["verbose"] = verbose


def quiet_transformers(downloads: bool = False) -> bool:
    """Our output, not transformers' progress bars and load reports (``--verbose`` keeps them: warnings and up). A
    finding that one of its warnings explains quotes it anyway (:mod:`loadguard._hf.noise` hears them either way).
    ``downloads``: a Hub id's files are about to be fetched: on a terminal (and not ``--quiet``) the download shows its
    progress bar. Returns whether it will."""
    import transformers

    if SETTINGS["verbose"]:
        transformers.logging.set_verbosity_warning()
        return False
    shown = (
        downloads
        and stderr().is_terminal
        and not SETTINGS["quiet"]
        and os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") in (None, "", "0")
    )
    if not shown:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    transformers.logging.set_verbosity_error()
    import huggingface_hub

    huggingface_hub.utils.logging.set_verbosity_error()  # its retry warnings ("... thrown while requesting HEAD")
    transformers.utils.logging.disable_progress_bar()
    if shown:
        huggingface_hub.utils.enable_progress_bars()  # the download's bar (transformers' own stay off)
    return shown


@contextlib.contextmanager
def progress(message: str, after: float = 1.0):
    """A spinner on stderr (a single line when stderr is not a terminal) if the block lasts over ``after`` s."""

    console = stderr()
    state: dict[str, Any] = {}
    lock = threading.Lock()
    if SETTINGS["quiet"]:
        yield
        return

    def start():
        with lock:
            if state.get("done"):
                return
            if console.is_terminal:
                state["status"] = console.status(visible(message))
                state["status"].start()
            else:
                console.print(f"{message} ...", highlight=False)

    timer = threading.Timer(after, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if "status" in state:
                state["status"].stop()


def parse_placement(device_map: str | None, max_memory: str | None, offload_folder: str | None) -> dict[str, Any]:
    """``--device-map auto|cpu|cuda|JSON``, ``--max-memory cpu=20GiB,0=10GiB`` (or JSON), ``--offload-folder``
    as ``from_pretrained`` keyword arguments."""

    out: dict[str, Any] = {}
    if device_map:
        text = device_map.strip()
        if text.startswith("{"):
            try:
                out["device_map"] = json.loads(text)
            except ValueError as error:
                raise InvalidOptionError(
                    f"--device-map {text!r} is not valid JSON ({error})",
                    'e.g. --device-map \'{"model.layers.1": "disk", "lm_head": "cpu"}\'',
                ) from None
        else:
            out["device_map"] = text
    if max_memory:
        text = max_memory.strip()
        try:
            parsed = json.loads(text) if text.startswith("{") else dict(item.split("=", 1) for item in text.split(","))
        except ValueError:
            raise InvalidOptionError(
                f"--max-memory {text!r} is not DEVICE=SIZE,...", "e.g. --max-memory cpu=20GiB,0=10GiB"
            ) from None
        out["max_memory"] = {int(k) if str(k).isdigit() else k: v for k, v in parsed.items()}
    if offload_folder:
        out["offload_folder"] = offload_folder
    return out


def loading_options(command):
    """The options every command that loads a model takes, the way ``from_pretrained`` spells them. The placement
    ones (``--device-map``, ``--max-memory``, ``--offload-folder``) and ``--attn-implementation`` reach the command as
    one ``placement`` dict of ``from_pretrained`` keyword arguments."""

    @functools.wraps(command)
    def with_placement(
        *args, device_map=None, max_memory=None, offload_folder=None, attn_implementation=None, **kwargs
    ):
        placement = parse_placement(device_map, max_memory, offload_folder)
        if attn_implementation:
            placement["attn_implementation"] = attn_implementation
        return command(*args, placement=placement, **kwargs)

    options = [
        click.argument("path"),
        click.option("--trust-remote-code", is_flag=True, help="Run the model's own code (read it first)."),
        click.option(
            "--auto-class",
            default=None,
            metavar="NAME",
            help="Auto class or model class; default: the one the config names, else AutoModel.",
        ),
        click.option(
            "--dtype",
            default="auto",
            show_default=True,
            metavar="auto|float32|bfloat16|float16",
            help="dtype to load in.",
        ),
        click.option("--device", default="cpu", show_default=True, metavar="DEVICE", help="cpu, cuda, cuda:N, mps."),
        click.option(
            "--poison/--no-poison",
            default=True,
            show_default=True,
            help="Fill uninitialized memory with NaN/INT_MAX during the load so leftovers cannot pass for values.",
        ),
        workaround_option("Apply a registered workaround"),
        workarounds_from_option(),
        click.option("--strict-stale", is_flag=True, help="A workaround that is no longer needed is an error."),
        click.option(
            "--device-map",
            default=None,
            metavar="auto|cpu|JSON",
            help='from_pretrained\'s device_map: auto, cpu, cuda, or a JSON module->device map ("disk" offloads).',
        ),
        click.option(
            "--max-memory",
            default=None,
            metavar="DEV=SIZE,...",
            help="from_pretrained's max_memory, e.g. cpu=20GiB,0=10GiB.",
        ),
        click.option(
            "--offload-folder",
            default=None,
            metavar="DIR",
            type=click.Path(file_okay=False, resolve_path=True),
            help="Where accelerate offloads to disk (loadguard never writes the model's folder).",
        ),
        click.option(
            "--attn-implementation",
            default=None,
            metavar="eager|sdpa|NAME",
            help="from_pretrained's attn_implementation (eager for code written for eager attention only).",
        ),
    ]
    for option in reversed(options):
        with_placement = option(with_placement)
    return with_placement


def load_model(
    path: str,
    *,
    trust_remote_code: bool,
    auto_class: str | None,
    dtype: str,
    device: str,
    poison: bool,
    workarounds=(),
    strict_stale: bool = False,
    placement: dict | None = None,
):
    """Load as a user would, with a progress indicator; every failure is a typed LoadguardError.

    Returns (model, outcomes of the before_import workarounds among ``workarounds``)."""
    from .._files import read_config

    read_config(path, trust_remote_code)  # a wrong path, config or trust answered before torch is imported
    from .. import _hf
    from .._audit import load_unaudited

    _hf.check_device(device)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code, "dtype": dtype, **(placement or {})}
    if device not in ("cpu", None):
        if "device_map" in kwargs:
            raise InvalidOptionError(
                "--device and --device-map both say where the model goes", "keep one: --device-map subsumes --device"
            )
        kwargs["device_map"] = device
    from .._files import is_hub_id

    downloading = quiet_transformers(downloads=is_hub_id(str(path)) and not os.path.exists(path))
    # a download draws its own bar on the terminal: no spinner over it (its output redirection would hide the bar)
    with contextlib.nullcontext() if downloading else progress(f"Loading {path} with from_pretrained"):
        return load_unaudited(
            auto_class, path, poison=poison, workarounds=workarounds, strict_stale=strict_stale, **kwargs
        )


def is_tty() -> bool:
    return sys.stdout.isatty()


def cases_and_runner(path: str, prompts, image_paths, **load_options):
    """What ``compare`` and ``trace`` share: the prompts and images (given, else the zoo entry's, else a
    built-in set) and a runner around the model loaded as a user would, with its processor and tokenizer."""
    from ..runner import HfRunner, default_cases, load_processing

    if prompts:
        prompt_list = list(prompts)
        images = [read_images(image_paths)] * len(prompt_list) if image_paths else None
    else:
        prompt_list, images = default_cases(path)
        if image_paths:
            images = [read_images(image_paths)] * len(prompt_list)
    from .. import workarounds as registry

    model, early = load_model(path, **load_options)
    chosen = registry.resolve(load_options.get("workarounds", ()))
    strict = load_options.get("strict_stale", False)
    late = _audit.after_load(model, chosen, strict=strict)
    processor, tokenizer = load_processing(path, load_options["trust_remote_code"])
    runner = HfRunner.from_model(
        model, processor, tokenizer, workarounds=[w.name for w in chosen if w.stage == "runner"]
    )
    runner.workarounds = early + late + runner.workarounds
    return prompt_list, images, runner


def read_images(paths):
    from PIL import Image

    images = []
    for path in paths:
        try:
            images.append(Image.open(path).convert("RGB"))
        except OSError as error:
            raise InvalidOptionError(f"cannot read image {path}: {error}", "pass PNG/JPEG files") from None
    return images
