"""What the pytest plugin's load hook costs a plain native load (issue 56): the hook wraps every auto class's
``from_pretrained`` and the model class's, and a test that loads a native model (transformers' own suite) goes through
both. Tiny native models of three architectures are loaded with ``AutoModel*.from_pretrained``, in one process,
alternately without the hook and through it (a test's session with ``--loadguard=off`` and no workarounds: the path
every load of a marked test takes before any audit); prints the median per load and their ratio. Target: at most 1.10x (the spread of one run on a 2-core machine is about 5%).

    python benchmarks/bench_hook.py [--rounds 9] [--loads 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _native_folders(root: Path) -> list[tuple[str, Path]]:
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tiny = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 128}
    models = {
        "AutoModel": BertModel(BertConfig(num_hidden_layers=2, **tiny)),
        "AutoModelForCausalLM": GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=128)),
        "AutoModelForCausalLM ": LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, num_key_value_heads=2, **tiny)),
    }
    folders = []
    for index, (auto, model) in enumerate(models.items()):
        folder = root / f"model{index}"
        model.save_pretrained(folder)
        folders.append((auto.strip(), folder))
    return folders


class _Item:
    """What the hook asks of a running test: no marker, no loadguard fixture."""

    nodeid = "bench_hook.py::test_native_load"
    fixturenames = ()

    def get_closest_marker(self, name):
        return None


def _load_all(folders, loads: int) -> float:
    import transformers

    start = time.perf_counter()
    for _ in range(loads):
        for auto, folder in folders:
            getattr(transformers, auto).from_pretrained(folder)
    return (time.perf_counter() - start) / (loads * len(folders))


def _hooked(folders, loads: int) -> float:
    from loadguard.pytest_plugin._hook import install
    from loadguard.pytest_plugin._state import Session

    session = Session(policy="off")
    install(session)
    session.current = _Item()
    try:
        return _load_all(folders, loads)
    finally:
        while session.undo:
            session.undo.pop()()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--loads", type=int, default=10)
    arguments = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="loadguard-bench-hook-") as workdir:
        folders = _native_folders(Path(workdir))
        _load_all(folders, 1)  # warm: imports, file cache
        times: dict[str, list[float]] = {"plain": [], "through the hook": []}
        for _ in range(arguments.rounds):  # interleaved: drift on a busy machine hits both alike
            times["plain"].append(_load_all(folders, arguments.loads))
            times["through the hook"].append(_hooked(folders, arguments.loads))
    plain = statistics.median(times["plain"])
    print(f"3 tiny native models (BERT, GPT-2, Llama), {arguments.rounds} round(s) x {arguments.loads} loads each:")
    for mode, values in times.items():
        median = statistics.median(values)
        print(f"  {mode:<17} {median * 1000:7.2f} ms per load  ({median / plain:.3f}x plain)")
    ratio = statistics.median(times["through the hook"]) / plain
    import _machine

    _machine.verdict("through the hook / plain", ratio, 1.10, name="plugin hook on a native load / plain", digits=3)


if __name__ == "__main__":
    import _machine

    _machine.announce()
    main()
