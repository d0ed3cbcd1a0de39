"""The scan's self-check: is its prediction still equal to a full audit on the transformers installed here?

A scan is only as right as the transformers internals it patches (:mod:`loadguard._hf.patches`), and those change
from release to release: the first scan on a (transformers, torch, loadguard code) combination runs this check (tiny
zoo models, one per failure mode, each scanned, then loaded in full under poison and audited: the verdicts must agree
tensor for tensor), records it under the user cache, and where it failed scans refuse (:class:`ScanError`, naming
the differing tensors). The versions the scan is proven on are those with a passing record.

Example::

    from loadguard import selfcheck
    result = selfcheck.run(loadguard.scan)   # always runs, records the outcome
    result.ok, result.seconds, [c.to_dict() for c in result.cases]
    selfcheck.proven_versions()       # ['4.57.6', '5.25.0', ...] from the records
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import hashlib
import json
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from packaging.version import InvalidVersion, Version

from .. import zoo
from .._audit import CONSTANT_FILL_NOTE, load
from .._files import Checkpoint
from .._infra import cache_folder, observers, write_atomically
from ..errors import ScanError
from ..report import Status, failing

# (zoo entry, what it covers): every way a load goes wrong that a scan predicts, and a clean model
CASES: tuple[tuple[str, str], ...] = (
    ("np_buffer", "a: non-persistent float/int/bool buffers not rebuilt"),
    ("np_buffer_in_checkpoint", "b: buffer values in the checkpoint, discarded"),
    ("shared_buffer", "c: one buffer in several modules (garbage, then meta)"),
    ("missing_key", "d: a parameter missing from the checkpoint"),
    (Status.OVERWRITTEN, "e: a loaded weight overwritten by _init_weights"),
    ("sharded", "e: the same, from a 3-shard checkpoint"),
    ("tensor_attribute", "a plain tensor attribute left on meta"),
    ("v4_rope_scaling", "v4-era code (a workaround) with rotary inv_freq"),
    ("clean", "nothing wrong: every tensor rebuilt"),
    ("native:llama", "a native model: rotary buffers rebuilt by transformers' own init"),
)
# Source files whose behaviour the record vouches for: a change to any of them is a new combination.
_VOUCHED = (
    "_hf/patches.py",
    "_scan/scanning.py",
    "_scan/classes.py",
    "_audit/auditing.py",
    "_audit/checks.py",
    "_audit/reference.py",
    "_audit/inventory.py",
    "_files/checkpoint.py",
    "_scan/selfcheck.py",
)

_running: contextvars.ContextVar[bool] = contextvars.ContextVar("loadguard_selfcheck_running", default=False)


@dataclass(frozen=True)
class CaseResult:
    entry: str
    covers: str
    predicted: dict[str, str]
    audited: dict[str, str]
    seconds: float = 0.0
    error: str = ""
    skipped: str = ""
    """Why the case proves nothing on this transformers: the scan and the full load both refuse the model alike (it
    does not load here at all, e.g. 5.8-5.9 do not copy a remote module's transitive relative imports)."""
    invisible: tuple[str, ...] = ()
    """Predicted constant fills (``zero_``, ``fill_``) onto tensors the checkpoint holds as that very constant: a write
    no value comparison can see (transformers 5.0-5.12 zero every loaded bias of custom code), left out of the
    comparison after checking the checkpoint."""

    @property
    def agree(self) -> bool:
        return not self.error and self.predicted == self.audited

    def differing(self) -> list[str]:
        """``tensor: predicted X, audited Y`` for every tensor the two verdicts disagree on."""
        if self.error:
            return [self.error]
        names = sorted(set(self.predicted) | set(self.audited))
        return [
            f"{name}: predicted {self.predicted.get(name, 'ok')}, audited {self.audited.get(name, 'ok')}"
            for name in names
            if self.predicted.get(name) != self.audited.get(name)
        ]

    def to_dict(self) -> dict[str, Any]:
        document = {k: getattr(self, k) for k in ("entry", "covers", "predicted", "audited")}
        return {
            **document,
            "agree": self.agree,
            "differing": self.differing(),
            "seconds": round(self.seconds, 3),
            "error": self.error or None,
            "skipped": self.skipped or None,
            "invisible": list(self.invisible),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        return cls(
            data["entry"],
            data["covers"],
            dict(data["predicted"]),
            dict(data["audited"]),
            data.get("seconds", 0.0),
            data.get("error") or "",
            data.get("skipped") or "",
            tuple(data.get("invisible") or ()),
        )


@dataclass(frozen=True)
class SelfCheck:
    """One run of the self-check on one (transformers, torch, loadguard code) combination."""

    transformers: str
    torch: str
    code: str
    cases: tuple[CaseResult, ...]
    seconds: float
    ran_at: str = ""
    cached: bool = field(default=False, compare=False)

    @property
    def ok(self) -> bool:
        """Every case agrees, and most of them ran (a case both sides refuse alike proves nothing)."""
        ran = [case for case in self.cases if not case.skipped]
        return bool(self.cases) and all(case.agree for case in self.cases) and len(ran) * 2 > len(self.cases)

    def differing(self) -> list[str]:
        return [f"{case.entry}: {line}" for case in self.cases for line in case.differing()]

    def to_dict(self) -> dict[str, Any]:
        document = {k: getattr(self, k) for k in ("transformers", "torch", "code", "ok", "ran_at", "cached")}
        return {**document, "seconds": round(self.seconds, 3), "cases": [case.to_dict() for case in self.cases]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], cached: bool = False) -> SelfCheck:
        return cls(
            data["transformers"],
            data["torch"],
            data["code"],
            tuple(CaseResult.from_dict(c) for c in data["cases"]),
            data["seconds"],
            data.get("ran_at", ""),
            cached,
        )


def _versions() -> tuple[str, str]:
    import torch
    import transformers

    return transformers.__version__, torch.__version__


def code_fingerprint() -> str:
    """A short hash of the loadguard sources the record vouches for."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent.parent  # the loadguard package
    for name in _VOUCHED:
        digest.update(name.encode())
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:12]


def _folder() -> Path:
    return cache_folder("selfcheck")


def record_path() -> Path:
    """Where the record of the combination installed here is kept."""
    version, torch_version = _versions()
    return _folder() / f"transformers-{version}-torch-{torch_version.replace('+', '-')}-code-{code_fingerprint()}.json"


def recorded() -> SelfCheck | None:
    """The record for the combination installed here, if a self-check ran on it."""
    path = record_path()
    try:
        return SelfCheck.from_dict(json.loads(path.read_text()), cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def proven_versions() -> list[str]:
    """transformers versions with a passing self-check record on this machine (any torch, this loadguard code)."""

    code = code_fingerprint()
    found = set()
    for path in _folder().glob(f"transformers-*-code-{code}.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("ok"):
            found.add(data["transformers"])

    def order(text: str):
        try:
            return (0, Version(text), "")
        except InvalidVersion:
            return (1, Version("0"), text)

    return sorted(found, key=order)


@contextlib.contextmanager
def _checking() -> Iterator[None]:
    """Inside the self-check: its own scans skip the check, and its loads are not reported to listeners (the pytest
    plugin must not count them as a test's loads)."""

    token, quiet = _running.set(True), observers.silenced.set(True)
    try:
        yield
    finally:
        observers.silenced.reset(quiet)
        _running.reset(token)


def running() -> bool:
    """Whether a self-check is running (its own scans must not wait for it)."""
    return _running.get()


def _failing(report) -> dict[str, str]:
    return {f.tensor: f.status for f in report.failures}


def _native_llama(folder: Path) -> Path:
    """A tiny native Llama checkpoint (rotary embedding, tied nothing), saved as a user would."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
        LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _case(entry_name: str, covers: str, workdir: Path, scan: Callable[..., Any]) -> CaseResult:

    start = time.perf_counter()
    try:
        if entry_name.startswith("native:"):
            folder, auto_class, workarounds = _native_llama(workdir / "llama"), "AutoModelForCausalLM", ()
        else:
            entry = zoo.get(entry_name)
            folder, auto_class = zoo.build(entry_name, workdir / entry_name), entry.auto_class
            workarounds = "auto" if entry.workarounds else ()
    except Exception as error:
        return CaseResult(
            entry_name, covers, {}, {}, time.perf_counter() - start, f"could not build the model: {_describe(error)}"
        )
    predicted = audited = None
    try:
        predicted = scan(
            folder, model_class=auto_class, keys="header", trust_remote_code=True, workarounds=workarounds
        )
    except Exception as error:
        scan_error = _describe(error)
    try:
        audited = load(
            auto_class, folder, trust_remote_code=True, poison=True, on_problem="warn", workarounds=workarounds
        ).loadguard_report_as_loaded
    except Exception as error:
        load_error = _describe(error)
    seconds = time.perf_counter() - start
    if predicted is None and audited is None:  # both refuse the model alike: they agree (the case proves nothing here)
        return CaseResult(
            entry_name, covers, {}, {}, seconds, skipped=f"this transformers cannot load it at all: {load_error}"
        )
    if predicted is None or audited is None:
        side = (
            f"the scan failed ({scan_error}) where a full load works"
            if predicted is None
            else f"the full load failed ({load_error}) where the scan runs"
        )
        return CaseResult(entry_name, covers, {}, {}, seconds, side)
    if predicted.summary("checkpoint_fidelity").checked == 0 or audited.summary("checkpoint_fidelity").checked == 0:
        return CaseResult(
            entry_name,
            covers,
            {},
            {},
            seconds,
            "a side compared no weights: the differential would agree with anything",
        )
    expected, invisible = reconcile([f.to_dict() for f in predicted.findings], _failing(audited), folder)
    return CaseResult(entry_name, covers, expected, _failing(audited), seconds, invisible=invisible)


def _describe(error: BaseException) -> str:
    return getattr(error, "message", None) or f"{type(error).__name__}: {error}"


def reconcile(predicted: list[dict], audited: dict[str, str], folder: Any) -> tuple[dict[str, str], tuple[str, ...]]:
    """A scan's failing findings (JSON form) as a full audit of the checkpoint in ``folder`` can see them: predicted
    constant fills (``zero_``, ``fill_``) onto tensors the checkpoint holds as that very constant are left out (a
    write no value comparison sees; transformers 5.0-5.12 zero every loaded bias of custom code). Returns
    ``({tensor: status}, the tensors left out)``."""

    expected = {f["tensor"]: f["status"] for f in failing(predicted)}
    candidates = [
        f["tensor"]
        for f in failing(predicted)
        if f["status"] == Status.OVERWRITTEN and CONSTANT_FILL_NOTE in f["detail"] and f["tensor"] not in audited
    ]
    invisible = tuple(sorted(name for name in candidates if _holds_a_constant(Path(str(folder)), name)))
    for name in invisible:
        expected.pop(name)
    return expected, invisible


def _holds_a_constant(folder: Path, name: str) -> bool:
    """Whether the checkpoint in ``folder`` holds ``name`` as one value repeated (what a constant fill writes)."""

    checkpoint = Checkpoint.open(folder)
    try:
        if name not in checkpoint.keys():
            return False
        value = checkpoint.get(name)
        return value.numel() > 0 and bool((value == value.reshape(-1)[0]).all())
    finally:
        checkpoint.close()


def run(scan: Callable[..., Any], *, record: bool = True) -> SelfCheck:
    """Run the self-check of ``scan`` (:func:`loadguard.scan`, which sits above this module and passes itself) now:
    every case, in a temporary folder of zoo models; with ``record``, keep the outcome for this combination."""

    version, torch_version = _versions()
    start = time.perf_counter()
    with _checking(), warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="loadguard-selfcheck-") as workdir:
        warnings.simplefilter("ignore")  # the zoo's broken loads warn by design: the verdicts are what counts
        cases = tuple(_case(name, covers, Path(workdir), scan) for name, covers in CASES)
    result = SelfCheck(
        version,
        torch_version,
        code_fingerprint(),
        cases,
        time.perf_counter() - start,
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    if record:
        write_atomically(record_path(), json.dumps(result.to_dict(), indent=2))
    return result


def ensure(scan: Callable[..., Any]) -> SelfCheck | None:
    """Before a scan: the recorded self-check of this combination, else run it now (once: other processes wait on a
    lock). Raises :class:`loadguard.errors.ScanError` naming the differing tensors if it failed. Returns None inside
    a self-check."""
    if running():
        return None

    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        result = recorded() or run(scan)
    if not result.ok:
        differing = result.differing()
        shown = "; ".join(differing[:4]) + (f" and {len(differing) - 4} more" if len(differing) > 4 else "")
        raise ScanError(
            f"the scan's self-check fails on transformers {result.transformers} (torch {result.torch}): its prediction differs "
            f"from a full audit ({shown}), so a scan here cannot be trusted",
            "audit a full load instead (loadguard audit PATH); `loadguard selfcheck` shows the table, and re-runs it",
        )
    return result


__all__ = [
    "CASES",
    "CaseResult",
    "SelfCheck",
    "ensure",
    "proven_versions",
    "reconcile",
    "recorded",
    "record_path",
    "run",
]
