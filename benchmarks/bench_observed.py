"""What "observed, not declared" costs an audit in the default mode, measured side by side. Prints ratios.

    python benchmarks/bench_observed.py            # every zoo entry, CLIP without logit_scale, a 2-layer Llama head
    python benchmarks/bench_observed.py --repeat 3 # median of N audits per model (default 5)

For every bundled (zoo) model, loaded as a user would (the workarounds its code needs, no poison), the audit runs
with the observed verdicts (a replay of transformers' init pass for tensors the checkpoint lacks; ties as the load
applied them, with a v4 model's own _tie_weights replayed) and again with both replaced by what the audit did before
(transformers' loading info taken at its word; a v4 tie list read by name): the difference is what observing costs.
One machine, one run; the audits are interleaved so drift hits both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

import loadguard
from loadguard import zoo
from loadguard._audit.reference import clear_cache
from loadguard._hf import replay as _replay

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()


@contextlib.contextmanager
def declared_only():
    """The audit as it decided before: no init replay (loading info at its word), no replay of v4 _tie_weights."""
    audit_module = importlib.import_module("loadguard._audit.auditing")
    replay, ties = audit_module._replay_initialization, _replay.v4_ties
    audit_module._replay_initialization = lambda model, names: None
    _replay.v4_ties = lambda model: None
    try:
        yield
    finally:
        audit_module._replay_initialization, _replay.v4_ties = replay, ties


def timed(model, info, repeat: int) -> tuple[float, object]:
    times, report = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        report = loadguard.audit(model, loading_info=info)
        times.append(time.perf_counter() - start)
    return statistics.median(times), report


def zoo_models(root: Path):
    from loadguard._audit.loading import load_unaudited

    for entry in zoo.entries():
        folder = zoo.build(entry.name, root / entry.name)
        model, _ = load_unaudited("AutoModelForCausalLM", folder, trust_remote_code=True, workarounds="auto")
        yield entry.name, model, None


def clip_without_logit_scale(root: Path):
    from safetensors.torch import load_file, save_file

    text = dict(
        vocab_size=99,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=20,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    vision = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8
    )
    folder = root / "clip"
    transformers.CLIPModel(
        transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)
    ).save_pretrained(folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["logit_scale"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    model, info = transformers.CLIPModel.from_pretrained(folder, output_loading_info=True)
    return "native: CLIPModel without logit_scale", model, info


def llama_head_from_base(root: Path):
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=3,
    )
    transformers.LlamaModel(config).save_pretrained(root / "llama")
    model, info = transformers.LlamaForSequenceClassification.from_pretrained(root / "llama", output_loading_info=True)
    return "native: Llama seq-cls head from a base checkpoint", model, info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {args.repeat} audits per model (median)"
    )
    print(f"{'model':<52} {'observed':>10} {'declared':>10} {'ratio':>7}  verdicts that differ")
    total_observed = total_declared = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = list(zoo_models(root)) + [clip_without_logit_scale(root), llama_head_from_base(root)]
        for name, model, info in models:
            clear_cache()
            loadguard.audit(model, loading_info=info)  # the reference is cached: both sides measure a warm audit
            observed, seen = timed(model, info, args.repeat)
            with declared_only():
                declared, said = timed(model, info, args.repeat)
            total_observed += observed
            total_declared += declared
            changed = sorted(
                f"{f.tensor}: {g.status} -> {f.status}"
                for f in seen.findings
                for g in said.findings
                if f.tensor == g.tensor and f.check == g.check and f.status != g.status
            )
            print(
                f"{name:<52} {observed * 1000:>8.1f}ms {declared * 1000:>8.1f}ms {observed / declared:>6.2f}x  {'; '.join(changed) or '-'}"
            )
    print(
        f"{'all':<52} {total_observed * 1000:>8.1f}ms {total_declared * 1000:>8.1f}ms {total_observed / total_declared:>6.2f}x"
    )
    import _machine

    _machine.record("audit observed / declared", total_observed / total_declared, unit="x")
    return 0


if __name__ == "__main__":
    import _machine

    _machine.announce()
    sys.exit(main())
