"""What an audit costs, measured side by side with what a user waits for anyway. Prints ratios.

    python benchmarks/bench_audit.py                 # ~370M-parameter Llama + a size sweep (a few minutes)
    python benchmarks/bench_audit.py --quick         # small sizes only, to check the script runs

All numbers come from one run on one machine: (1) from_pretrained alone, (2) from_pretrained + one short
forward pass, (3) the audit, split into reference build, buffer comparison and checkpoint fidelity,
(4) the naive reference a user would write (an eager from_config build), (5) ceilings: torch.equal and
memcpy over two in-memory copies of the same bytes. Extra memory is anonymous RSS (RssAnon: what the
process allocated, not the file-backed pages of the memory-mapped checkpoint), sampled every 2 ms.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import loadguard
from loadguard._audit import checks
from loadguard._audit.auditing import audit
from loadguard._audit.inventory import Inventory
from loadguard._audit.reference import build_reference, clear_cache
from loadguard._files.checkpoint import Checkpoint
from loadguard._files.keymap import map_keys

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()


def rss_anon() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakSampler:
    """Peak anonymous RSS above the level at entry, sampled in a thread."""

    def __init__(self, interval: float = 0.002):
        self.interval = interval
        self.peak = 0

    def __enter__(self):
        gc.collect()
        self.base = rss_anon()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_anon() - self.base)
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, rss_anon() - self.base)


def timed(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def llama_config(hidden: int, layers: int, vocab: int = 32000) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(hidden * 2.75),
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 64),
        tie_word_embeddings=False,
    )


def save_model(config: LlamaConfig, folder: Path) -> int:

    torch.manual_seed(0)
    with torch.device("cpu"):
        model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    model = None
    gc.collect()
    return params


def measure(folder: Path, config: LlamaConfig, naive: bool) -> dict:
    out: dict = {}
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])

    def load():
        return AutoModelForCausalLM.from_pretrained(folder)

    out["load"] = timed(lambda: load())

    def load_forward():
        model = load()
        with torch.no_grad():
            model(ids)

    out["load_forward"] = timed(load_forward)

    model = load()
    with torch.no_grad():
        model(ids)  # page the weights in as a user's first forward does

    def reference():
        clear_cache()
        build_reference(model)

    out["reference"] = timed(reference)
    ref = build_reference(model)
    out["buffers"] = timed(lambda: audit(model, False, reference=ref)) - 0.0
    ckpt = Checkpoint.open(folder)
    out["fidelity"] = timed(lambda: audit(model, ckpt, reference=None))
    out["fidelity_reason"] = audit(model, ckpt, reference=None).summary("checkpoint_fidelity").reason
    # the same check with every value read and compared (what happens when weights were written, cast or copied)
    inventory = Inventory(model)
    key_map = map_keys(model, ckpt, [e.name for e in inventory.state_entries])

    def compare_all():
        with torch.no_grad():
            for name, key in key_map.to_checkpoint.items():
                checks.check_checkpoint_fidelity(inventory[name], inventory.tensor(name), ckpt.get(key), key)

    out["fidelity_compared"] = timed(compare_all)
    clear_cache()
    out["audit"] = timed(lambda: (clear_cache(), audit(model, folder)))

    checkpoint_bytes = sum(ckpt.nbytes(k) for k in ckpt.keys())
    out["checkpoint_bytes"] = checkpoint_bytes
    buffers = [b for _, b in model.named_buffers()]
    buffer_bytes = sum(b.numel() * b.element_size() for b in buffers)
    largest = max(p.numel() * p.element_size() for p in model.parameters())
    out["buffer_bytes"], out["largest_tensor_bytes"] = buffer_bytes, largest
    clear_cache()
    with PeakSampler() as peak:
        audit(model, folder)
    out["audit_peak_extra"] = peak.peak

    # ceilings: two in-memory copies of the same bytes
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    twin = flat.clone()
    out["ceiling_equal"] = timed(lambda: torch.equal(flat, twin))
    target = torch.empty_like(flat)
    out["ceiling_memcpy"] = timed(lambda: target.copy_(flat))
    out["compared_bytes"] = flat.numel() * flat.element_size()
    flat = twin = target = None  # free them before the naive build

    if naive:

        def eager():
            return AutoModelForCausalLM.from_config(config)

        out["naive_reference"] = timed(eager, repeat=1)
    model = None
    gc.collect()
    return out


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    args = parser.parse_args()
    main_size = (256, 4) if args.quick else (1024, 24)
    sweep = [(128, 2), (192, 3), (256, 4)] if args.quick else [(512, 8), (768, 16), (1024, 24)]
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, loadguard {loadguard.__version__}, {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-") as tmp:
        results = {}
        for hidden, layers in sorted(set(sweep) | {main_size}):
            folder = Path(tmp) / f"llama-{hidden}x{layers}"
            config = llama_config(hidden, layers)
            params = save_model(config, folder)
            results[(hidden, layers)] = (params, measure(folder, config, naive=(hidden, layers) == main_size))
            print(f"  measured llama {hidden}x{layers} ({params / 1e6:.0f}M params)", file=sys.stderr)

        params, r = results[main_size]
        buffer_audit = r["reference"] + r["buffers"]
        print(
            f"\nMain model: Llama hidden {main_size[0]} x {main_size[1]} layers, {params / 1e6:.0f}M parameters, "
            f"{r['checkpoint_bytes'] / 1e9:.2f} GB safetensors (float32)"
        )
        rows = [
            ("(1) from_pretrained", r["load"]),
            ("(2) from_pretrained + one forward", r["load_forward"]),
            ("(3a) audit: reference build", r["reference"]),
            ("(3b) audit: buffer comparison (reference cached)", r["buffers"]),
            ("(3c) audit: checkpoint fidelity", r["fidelity"]),
            ("(3c') fidelity with every value compared", r["fidelity_compared"]),
            ("(3)  audit, whole (fresh reference)", r["audit"]),
            ("(4) naive reference: eager from_config", r["naive_reference"]),
            ("(5a) ceiling: torch.equal in memory", r["ceiling_equal"]),
            ("(5b) ceiling: memcpy in memory", r["ceiling_memcpy"]),
        ]
        for label, seconds in rows:
            print(f"  {label:<50} {seconds:8.3f} s")
        fidelity_tp = gbps(r["checkpoint_bytes"], r["fidelity"])
        compared_tp = gbps(r["checkpoint_bytes"], r["fidelity_compared"])
        equal_tp = gbps(r["compared_bytes"], r["ceiling_equal"])
        print("\nRatios (target in brackets):")
        print(f"  buffer audit / naive eager reference   {buffer_audit / r['naive_reference']:6.1%}   [<= 5%]")
        print(f"  buffer audit / (2)                     {buffer_audit / r['load_forward']:6.1%}   [<= 50%]")
        print(
            f"  fidelity throughput / torch.equal      {fidelity_tp / equal_tp:6.1%}   [>= 70%]  ({fidelity_tp:.1f} vs {equal_tp:.1f} GB/s; memcpy {gbps(r['compared_bytes'], r['ceiling_memcpy']):.1f} GB/s)"
        )
        print(f"    ({r['fidelity_reason']})")
        print(
            f"  every value compared / torch.equal     {compared_tp / equal_tp:6.1%}            ({compared_tp:.1f} GB/s: weights written, cast or copied after loading)"
        )
        print(f"  whole audit / (2)                      {r['audit'] / r['load_forward']:6.2f}x   [<= 1.5x]")
        allowed = r["buffer_bytes"] + r["largest_tensor_bytes"]
        import _machine

        _machine.record("audit buffers / naive eager reference", buffer_audit / r["naive_reference"], unit="x")
        _machine.record("audit buffers / load+forward", buffer_audit / r["load_forward"], unit="x")
        _machine.record("audit fidelity throughput / torch.equal", fidelity_tp / equal_tp, better="higher", unit="x")
        _machine.record("audit whole / load+forward", r["audit"] / r["load_forward"], unit="x")
        print(
            f"  audit peak extra memory                {r['audit_peak_extra'] / 1e6:8.1f} MB  [<= buffers {r['buffer_bytes'] / 1e6:.1f} MB + largest tensor {r['largest_tensor_bytes'] / 1e6:.1f} MB = {allowed / 1e6:.1f} MB]"
        )

        print("\nScaling (same run):")
        print(f"  {'model':<16}{'params':>9}{'(2) s':>9}{'audit s':>9}{'audit/(2)':>11}{'fidelity GB/s':>15}")
        for (hidden, layers), (n, m) in sorted(results.items()):
            print(
                f"  {f'{hidden}x{layers}':<16}{n / 1e6:>8.0f}M{m['load_forward']:>9.3f}{m['audit']:>9.3f}"
                f"{m['audit'] / m['load_forward']:>11.2f}{gbps(m['checkpoint_bytes'], m['fidelity']):>15.1f}"
            )


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
