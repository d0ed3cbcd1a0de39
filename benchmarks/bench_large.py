"""Large models: a Llama-7B-shaped bf16 checkpoint (about 13.5 GB, random weights written locally, streamed shard by
shard, reused if present), measured side by side in one run:

- ``from_pretrained``, a first forward on 8 tokens, ``loadguard.audit``, ``loadguard.scan``: audit / (load + forward),
  target <= 5%; peak extra resident memory during the audit, target <= non-persistent buffer bytes + the largest tensor;
- the same with half the layers disk-offloaded: verification throughput of the offloaded weights against the raw
  read speed of the same bytes measured in this run, target >= 50%;
- cast loads (a float32 checkpoint loaded in bfloat16, and a bfloat16 one in float32; a 1.3B shape): every value is
  compared, throughput against in-memory ``torch.equal`` of tensors of the same size, target >= 70%;
- audit / (load + forward) from 58M to 7B parameters in one table.

    python benchmarks/bench_large.py          (make bench-large; checkpoints under $LOADGUARD_CACHE/bench, ~25 GB)
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import psutil  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()

import loadguard  # noqa: E402
from loadguard._infra.envs import cache_root  # noqa: E402

SHAPES = {
    "58M": dict(hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8, vocab_size=32000),
    "374M": dict(
        hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16, vocab_size=32000
    ),
    "1.3B": dict(
        hidden_size=2048, intermediate_size=5504, num_hidden_layers=24, num_attention_heads=16, vocab_size=32000
    ),
    "7B": dict(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=32000
    ),
}
SHARD_BYTES = 2 << 30
PROCESS = psutil.Process()


def checkpoint(shape: str, dtype: torch.dtype) -> Path:
    """The random-weight checkpoint of ``shape`` in ``dtype``, written once (one shard in memory at a time)."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = cache_root() / "bench" / f"llama-{shape}-{str(dtype).replace('torch.', '')}"
    if (folder / "loadguard-bench-complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = LlamaConfig(
        **SHAPES[shape],
        num_key_value_heads=SHAPES[shape]["num_attention_heads"],
        dtype=str(dtype).replace("torch.", ""),
        tie_word_embeddings=False,
    )
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(folder)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in LlamaForCausalLM(config).state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    shard, size, files, weight_map, total = {}, 0, [], {}, 0

    def flush():
        nonlocal shard, size
        name = f"model-{len(files) + 1:05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        files.append(name)
        weight_map.update(dict.fromkeys(shard, name))
        shard, size = {}, 0

    for key, tensor_shape in shapes.items():
        value = (
            (torch.randn(tensor_shape, generator=generator) * 0.02).to(dtype)
            if "norm" not in key
            else torch.ones(tensor_shape, dtype=dtype)
        )
        shard[key] = value
        size += value.numel() * value.element_size()
        total += value.numel() * value.element_size()
        if size >= SHARD_BYTES:
            flush()
    if shard:
        flush()
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    (folder / "loadguard-bench-complete").write_text("")
    return folder


class Peak:
    """Peak resident memory above the level at entry, sampled every 2 ms."""

    def __enter__(self):
        self.base = self.peak = PROCESS.memory_info().rss
        self.done = False
        self.thread = threading.Thread(target=self._watch)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done:
            self.peak = max(self.peak, PROCESS.memory_info().rss)
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.done = True
        self.thread.join()

    @property
    def mb(self) -> float:
        return (self.peak - self.base) / 2**20


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def budget(model) -> tuple[float, float]:
    """(non-persistent buffer MB, largest tensor MB)."""
    from loadguard._audit.inventory import Inventory

    inventory = Inventory(model)
    np_bytes = sum(
        inventory.tensor(e.name).numel() * inventory.tensor(e.name).element_size()
        for e in inventory.non_persistent_buffers
    )
    largest = max(
        e_numel * size for e_numel, size in ((t.numel(), t.element_size()) for t in model.state_dict().values())
    )
    return np_bytes / 2**20, largest / 2**20


def plain(folder: Path, label: str) -> dict:
    from transformers import AutoModelForCausalLM

    model, load_s = timed(lambda: AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16))
    tokens = torch.arange(8)[None]
    with torch.no_grad():
        _, forward_s = timed(lambda model=model: model(tokens))
    loadguard.audit(model, reference=None, checkpoint=False)  # imports warmed
    with Peak() as peak:
        report, audit_s = timed(lambda model=model: loadguard.audit(model))
    np_mb, largest_mb = budget(model)
    params = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    _, scan_s = timed(lambda: loadguard.scan(folder, dtype="bfloat16"))
    return {
        "label": label,
        "params": params,
        "load": load_s,
        "forward": forward_s,
        "audit": audit_s,
        "scan": scan_s,
        "ok": report.ok,
        "peak_mb": peak.mb,
        "bound_mb": np_mb + largest_mb,
        "reason": report.summary("checkpoint_fidelity").reason,
    }


def offloaded(folder: Path) -> dict:
    """Half the decoder layers on disk (transformers offloads them from the original checkpoint). Verified twice:
    as the audit does it (a hook that reads the checkpoint's own bytes proves them equal without reading), and
    with every offloaded value read through the hook and compared."""
    import importlib

    audit_module = importlib.import_module("loadguard._audit.auditing")
    from transformers import AutoModelForCausalLM

    from loadguard._files.checkpoint import Checkpoint
    from loadguard._hf.offload import Offloaded

    layers = SHAPES["7B"]["num_hidden_layers"]
    layout = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    layout.update({f"model.layers.{i}": ("disk" if i >= layers // 2 else "cpu") for i in range(layers)})
    with tempfile.TemporaryDirectory() as offload_folder:
        model, load_s = timed(
            lambda: AutoModelForCausalLM.from_pretrained(
                folder, dtype=torch.bfloat16, device_map=layout, offload_folder=offload_folder
            )
        )
        tokens = torch.arange(8)[None]
        with torch.no_grad():
            _, forward_s = timed(lambda model=model: model(tokens))
        names = list(Offloaded(model))
        Offloaded(model).value(names[0])  # the reader's imports warmed
        with Peak() as peak:
            report, audit_s = timed(lambda model=model: loadguard.audit(model))
        original = audit_module._hook_reads_the_checkpoint
        audit_module._hook_reads_the_checkpoint = lambda *args: (
            False
        )  # every offloaded value read through its hook and compared
        try:
            with Peak() as read_peak:
                read_report, read_s = timed(lambda model=model: loadguard.audit(model))
        finally:
            audit_module._hook_reads_the_checkpoint = original
        # the raw read speed of the same bytes: the file regions, read into one reused buffer
        offloaded_bytes = 0
        with Checkpoint.open(folder) as checkpoint:
            regions = [checkpoint.location(name) for name in names]
        buffer = bytearray(max(end - start for _, start, end in regions))
        start = time.perf_counter()
        for path, begin, end in regions:
            with open(path, "rb", buffering=0) as handle:
                handle.seek(begin)
                handle.readinto(memoryview(buffer)[: end - begin])
            offloaded_bytes += end - begin
        raw_s = time.perf_counter() - start
        np_mb, largest_mb = budget(model)
        del model
        gc.collect()
    return {
        "load": load_s,
        "forward": forward_s,
        "audit": audit_s,
        "read_audit": read_s,
        "ok": report.ok and read_report.ok,
        "offloaded": len(names),
        "gb": offloaded_bytes / 1e9,
        "raw_s": raw_s,
        "peak_mb": peak.mb,
        "read_peak_mb": read_peak.mb,
        "bound_mb": np_mb + largest_mb,
        "reason": report.summary("checkpoint_fidelity").reason,
    }


def cast(stored: torch.dtype, loaded: torch.dtype) -> dict:
    """Every value compared (nothing can be proven from page state when the dtype changes)."""
    from transformers import AutoModelForCausalLM

    folder = checkpoint("1.3B", stored)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=loaded)
    loadguard.audit(model)  # page cache warm, reference cached
    report, audit_s = timed(lambda model=model: loadguard.audit(model))
    fidelity_s = report.seconds["checkpoint"]
    compared = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    twins = [t.clone() for t in list(model.state_dict().values())[:40]]
    originals = list(model.state_dict().values())[:40]
    start = time.perf_counter()
    for a, b in zip(originals, twins):
        torch.equal(a, b)
    equal_gbps = sum(t.numel() * t.element_size() for t in twins) / 1e9 / (time.perf_counter() - start)
    del model, twins, originals
    gc.collect()
    return {
        "stored": stored,
        "loaded": loaded,
        "ok": report.ok,
        "gbps": compared / 1e9 / fidelity_s,
        "equal_gbps": equal_gbps,
    }


def main() -> None:
    seven = checkpoint("7B", torch.bfloat16)
    print(
        f"## Llama-7B-shaped, bfloat16, random weights ({sum(p.stat().st_size for p in seven.glob('*.safetensors')) / 1e9:.1f} GB at {seven})"
    )
    rows = [plain(checkpoint(shape, torch.bfloat16), shape) for shape in ("58M", "374M", "1.3B")]
    big = plain(seven, "7B")
    rows.append(big)
    ratio = big["audit"] / (big["load"] + big["forward"])
    print(
        f"from_pretrained {big['load']:.2f} s, first forward (8 tokens) {big['forward']:.2f} s, audit {big['audit']:.2f} s, scan {big['scan']:.2f} s"
    )
    print(f"audit / (load + forward) = {ratio:.1%} (target <= 5%)   audit clean: {big['ok']}   ({big['reason']})")
    print(
        f"peak extra memory during the audit {big['peak_mb']:.0f} MB (target <= non-persistent buffers + largest tensor = {big['bound_mb']:.0f} MB)"
    )

    off = offloaded(seven)
    raw = off["gb"] / off["raw_s"]
    print(f"\n## Half the layers disk-offloaded ({off['offloaded']} tensors, {off['gb']:.1f} GB the hooks read)")
    print(
        f"from_pretrained {off['load']:.2f} s, first forward {off['forward']:.2f} s, clean: {off['ok']} ({off['reason']})"
    )
    print(f"raw read of the same bytes (page cache as it is): {raw:.2f} GB/s")
    for label, seconds, peak_mb in (
        ("audit (hooks reading the checkpoint's own bytes: proven)", off["audit"], off["peak_mb"]),
        ("audit, every offloaded value read and compared", off["read_audit"], off["read_peak_mb"]),
    ):
        throughput = off["gb"] / seconds
        print(
            f"{label}: {seconds:.2f} s = {throughput:.2f} GB/s, {throughput / raw:.0%} of the raw read (target >= 50%); "
            f"peak extra memory {peak_mb:.0f} MB (target <= {off['bound_mb']:.0f} MB)"
        )

    print("\n## Cast loads (1.3B shape): every value compared")
    for stored, loaded in ((torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)):
        row = cast(stored, loaded)
        print(
            f"{str(stored)[6:]:>8} checkpoint loaded as {str(loaded)[6:]:<8}: {row['gbps']:.2f} GB/s vs in-memory torch.equal {row['equal_gbps']:.2f} GB/s "
            f"= {row['gbps'] / row['equal_gbps']:.0%} (target >= 70%), clean: {row['ok']}"
        )

    print("\n## Scaling: audit / (load + first forward)")
    print(f"{'params':>8} {'load s':>8} {'forward s':>10} {'audit s':>8} {'scan s':>8} {'audit/(load+fwd)':>17}")
    for row in rows:
        print(
            f"{row['params'] / 1e6:>7.0f}M {row['load']:>8.2f} {row['forward']:>10.2f} {row['audit']:>8.3f} {row['scan']:>8.2f} {row['audit'] / (row['load'] + row['forward']):>16.1%}"
        )


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
