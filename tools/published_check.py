"""Try ``loadguard fix`` on published remote code nobody here wrote, and judge the result without loadguard's audit.

    python tools/published_check.py WORKDIR SOURCE_FOLDER...     # each: a folder with config.json and the model's code

For each source folder (its ``*.py`` files and ``config.json``; nothing else is read):

1. the config is shrunk to a few small layers (the size fields it has), float32;
2. under the transformers 4 it was written for (config.json's ``transformers_version``, else 4.57.6: the matrix's
   environments) the model is built with seed 0 and saved: the checkpoint; a plain ``from_pretrained`` of it there
   gives the ground truth (every parameter, buffer and tensor attribute). Code that relies on typing names older
   torch leaked is given them there (the environments have this torch, not the one it was written for);
3. on the running transformers, ``loadguard fix --workaround auto`` with the weights, and again without them;
4. the independent check: a plain ``from_pretrained`` of each fixed copy (the weightless one given the checkpoint),
   leftover memory NaN / INT_MAX through torch's own switches, no workaround, compared tensor by tensor with the truth;
   then its forward pass and 8 greedy tokens (inputs built from the config) against the original's on that 4.x;
5. what a maintainer would check before merging, with other tools than loadguard's: ``ruff check --select F`` finds
   nothing in the patched files the original lacks, the files compile (this Python, and Python 3.10's grammar),
   ``git apply --check`` and ``patch -p1 --dry-run`` take the diff, and the copy saves (``save_pretrained``) and loads
   again with plain transformers to the same tensors.

Prints one line per model and writes ``WORKDIR/results.json``. Nothing of the published code is kept in this project:
the source folders are read where they are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SIZES = {
    ("num_hidden_layers", "num_layers", "n_layer", "n_layers"): 2,
    ("hidden_size", "n_embd", "d_model"): 128,  # MiniCPM-V's resampler has hidden_size // 128 heads
    ("num_attention_heads", "n_head", "n_heads"): 4,
    ("num_key_value_heads", "multi_query_group_num", "n_kv_heads", "kv_n_heads"): 2,
    ("kv_channels", "head_dim"): 32,  # hidden_size / num_attention_heads: code that splits by hidden_size needs it
    ("intermediate_size", "ffn_hidden_size", "n_inner"): 128,
    ("moe_intermediate_size",): 32,
    ("n_routed_experts", "num_experts"): 4,
    ("num_experts_per_tok", "moe_top_k"): 2,
    ("n_group", "topk_group", "first_k_dense_replace", "n_shared_experts"): 1,
    ("kv_lora_rank",): 16,
    ("qk_rope_head_dim", "qk_nope_head_dim"): 8,
    ("v_head_dim",): 16,
    ("vocab_size", "padded_vocab_size"): 256,
    ("max_position_embeddings", "seq_length", "n_positions", "max_sequence_length", "model_max_length"): 128,
}
OFF = ("use_flash_attn", "use_flash_attention", "use_dynamic_ntk", "use_logn_attn")
DROP = ("quantization_config", "torch_dtype", "pre_seq_len")


def shrink(config: dict) -> dict:
    out = {
        key: shrink(value) if isinstance(value, dict) and key.endswith("_config") else value
        for key, value in config.items()
    }
    for names, value in SIZES.items():
        for name in names:
            if isinstance(out.get(name), int) and out[name] > value:
                out[name] = value
    if isinstance(out.get("q_lora_rank"), int):
        out["q_lora_rank"] = 32
    for name in OFF:
        if name in out:
            out[name] = False
    for name in DROP:
        out.pop(name, None)
    if "architectures" in config:
        out["dtype"] = "float32"
    return out


TENSORS = r"""
def all_tensors(model):
    import torch

    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(model.named_buffers(remove_duplicate=False))
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                named.setdefault(f"{prefix}.{key}" if prefix else key, value)
    return named
"""

BUILD = (
    TENSORS
    + r"""
import json, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
folder = sys.argv[1]
import os, shutil  # every file of the code where transformers copies it: 4.x misses a helper's own siblings
from transformers.utils import HF_MODULES_CACHE
modules = Path(HF_MODULES_CACHE, "transformers_modules", Path(folder).name)
modules.mkdir(parents=True, exist_ok=True)
for file in Path(folder).glob("*.py"):
    shutil.copyfile(file, modules / file.name)
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
auto_map = getattr(config, "auto_map", {}) or {}
cls = AutoModelForCausalLM if "AutoModelForCausalLM" in auto_map else AutoModel
from loadguard.workarounds import using  # code written for an older torch: the typing names it leaked

with using(["remote-code-typing-aliases"], folder):  # one block: remote modules stay imported between the two loads
    torch.manual_seed(0)
    model = cls.from_config(config, trust_remote_code=True, torch_dtype=torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():  # code that skips initialization (empty_init) would save leftover memory: seeded values
        for parameter in model.parameters():
            if not torch.isfinite(parameter).all() or parameter.abs().max() > 1e4:
                parameter.normal_(0.0, 0.02)
    try:
        model.save_pretrained(folder + "/.saved", safe_serialization=True)
    except RuntimeError as error:  # tied weights its 4.x does not declare (Falcon's RW code): as it was published then
        if "shared tensors" not in str(error):
            raise
        model.save_pretrained(folder + "/.saved", safe_serialization=False)
    for file in Path(folder + "/.saved").iterdir():
        if file.suffix in (".safetensors", ".bin") or file.name.endswith(".index.json"):
            file.rename(Path(folder) / file.name)
    torch.manual_seed(0)
    loaded = cls.from_pretrained(folder, trust_remote_code=True).eval()
named = all_tensors(loaded)
torch.save({k: v.detach().clone() for k, v in named.items() if not v.is_meta}, sys.argv[2])
from loadguard._hf import model_outputs  # inputs built from the config; plain forward and generate, no audit

seen = model_outputs(loaded)
torch.save({"values": seen["values"], "tokens": seen["tokens"], "error": seen["error"], "part": seen["part"]}, sys.argv[3])
print(json.dumps({"class": type(loaded).__name__, "auto": cls.__name__, "tensors": len(named)}))
"""
)

CHECK = (
    TENSORS
    + r"""
import json, sys, torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
folder, truth_path, auto, outputs_path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
torch.use_deterministic_algorithms(True, warn_only=True)
torch.utils.deterministic.fill_uninitialized_memory = True
cls = {"AutoModel": AutoModel, "AutoModelForCausalLM": AutoModelForCausalLM}[auto]
try:
    model = cls.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
except Exception as error:
    print(json.dumps({"loads": False, "error": f"{type(error).__name__}: {str(error)[:200]}"}))
    sys.exit(0)
truth = torch.load(truth_path)
named = all_tensors(model)
wrong = []
for name, value in truth.items():
    got = named.get(name)
    if got is None or got.is_meta or got.shape != value.shape:
        wrong.append(name)
    elif not torch.equal(got.detach().to(value.dtype), value) and not (
        value.is_floating_point() and torch.allclose(got.detach().to(value.dtype), value, rtol=1e-6, atol=1e-7, equal_nan=True)
    ):
        wrong.append(name)
from loadguard._hf import model_outputs

reference, seen = torch.load(outputs_path, weights_only=False), model_outputs(model.eval())
late = reference["error"] and reference["error"].get("stage") == "generate"  # its forward ran; its generate did not
if reference["values"] is None or (reference["error"] and not late):
    outputs = f"no reference: the original on 4.x {reference['error'] or 'gave no tensor'}"
elif seen["values"] is None or (seen["error"] and not late):
    outputs = f"differ: on 5.x {seen['error'] or 'no tensor'}"
else:
    a, b = reference["values"], seen["values"]
    if a.shape != b.shape:
        outputs = f"differ: shape {tuple(b.shape)} vs {tuple(a.shape)}"
    else:
        gap = float((a.log_softmax(-1) - b.log_softmax(-1)).abs().nan_to_num(float("inf")).max())
        same_tokens = late or reference["tokens"] == seen["tokens"]
        tokens = (
            f"greedy tokens not compared: the original's generate fails on its 4.x too "
            f"({reference['error']['type']} at {reference['error']['line']})"
            if late
            else f"{len(seen['tokens'] or [])} greedy tokens the same"
        )
        outputs = (
            f"equal (max |diff| of logprobs {gap:.3g}; {tokens})"
            if gap <= 1e-4 and same_tokens
            else f"differ (max |diff| of logprobs {gap:.3g}; tokens {seen['tokens']} vs {reference['tokens']})"
        )
print(json.dumps({"loads": True, "wrong": sorted(wrong)[:12], "wrong_count": len(wrong), "tensors": len(truth), "outputs": outputs}))
"""
)


SAVES = r"""
import json, sys, tempfile, torch
from transformers import AutoModel, AutoModelForCausalLM
folder, auto = sys.argv[1], sys.argv[2]
cls = {"AutoModel": AutoModel, "AutoModelForCausalLM": AutoModelForCausalLM}[auto]
model = cls.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32)
with tempfile.TemporaryDirectory() as saved:
    try:
        model.save_pretrained(saved)
        again = cls.from_pretrained(saved, trust_remote_code=True, dtype=torch.float32)
    except Exception as error:
        print(json.dumps({"saves": False, "error": f"{type(error).__name__}: {str(error)[:200]}"}))
        sys.exit(0)
    first = dict(model.named_parameters()) | dict(model.named_buffers())
    second = dict(again.named_parameters()) | dict(again.named_buffers())
    differ = [n for n in first if n not in second or not torch.equal(first[n].nan_to_num(), second[n].nan_to_num())]
print(json.dumps({"saves": not differ, "differ": differ[:8]}))
"""


def mergeable(original: Path, fixed: Path, auto: str, env: dict) -> dict:
    """What a maintainer checks before merging the copy, with tools other than loadguard's own checks."""
    import ast
    import collections
    import tempfile

    diff = (fixed / "loadguard-fix.diff").read_text() if (fixed / "loadguard-fix.diff").is_file() else ""
    changed = sorted({line[6:].split("\t")[0] for line in diff.splitlines() if line.startswith("+++ b/")})
    ruff = str(Path(sys.executable).with_name("ruff"))

    def findings(path: Path) -> collections.Counter:
        code, out, _ = run(
            [ruff, "check", "--isolated", "--no-cache", "--select", "F", "--output-format", "json", str(path)]
        )
        try:
            return collections.Counter((f["code"], f["message"]) for f in json.loads(out or "[]"))
        except ValueError:
            return collections.Counter()

    new = []
    compiles = []
    for name in changed:
        if not name.endswith(".py"):
            continue
        added = findings(fixed / name) - findings(original / name)
        new += [f"{name}: {code} {message}" for (code, message), count in added.items() for _ in range(count)]
        text = (fixed / name).read_text()
        try:
            compile(text, name, "exec")
            ast.parse(text, feature_version=(3, 10))
        except SyntaxError as error:
            compiles.append(f"{name}:{error.lineno}: {error.msg}")
    applies = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in changed:
            shutil.copy(original / name, Path(scratch) / name)
        for tool in (["git", "apply", "--check", "-"], ["patch", "-p1", "--dry-run", "--batch", "--silent"]):
            done = subprocess.run(tool, cwd=scratch, input=diff, capture_output=True, text=True)
            applies[tool[0]] = done.returncode == 0 or (done.stderr or done.stdout).strip()[:200]
    saves = last_json(run([sys.executable, "-c", SAVES, str(fixed), auto], env)[1])
    return {"ruff_F_new": new, "compiles": compiles or True, "applies": applies, "saves": saves}


def run(command: list[str], env: dict | None = None, timeout: int = 900) -> tuple[int, str, str]:
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    return result.returncode, result.stdout, result.stderr


def last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


def main() -> None:
    from loadguard._fix.compat import written_for
    from loadguard._fix.proofs import COMPAT_VERSION
    from loadguard._infra import envs

    workdir, sources = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    fallback = envs.environment(COMPAT_VERSION)
    if not fallback.ok:
        raise SystemExit(f"the {COMPAT_VERSION} environment is needed: {fallback.reason}")
    current = {**os.environ, "HF_HUB_OFFLINE": "1"}
    loadguard = str(Path(sys.executable).with_name("loadguard"))
    results = []
    for source in sources:
        name = source.name if source.name not in ("repo", "model", "aaa") else source.parent.name
        base = workdir / name
        shutil.rmtree(base, ignore_errors=True)
        original = base / "original"
        original.mkdir(parents=True)
        for file in source.glob("*.py"):
            shutil.copy(file, original / file.name)
        row: dict = {"model": name}
        try:
            config = json.loads((source / "config.json").read_text())
        except (OSError, ValueError) as error:  # a Git LFS pointer in place of the file, say
            row["status"] = f"skipped: config.json is not JSON ({type(error).__name__})"
            results.append(row)
            print(json.dumps(row), flush=True)
            continue
        (original / "config.json").write_text(json.dumps(shrink(config), indent=2))
        # built where the model was written for (config.json's transformers_version), as fix's proof (b) chooses
        code, out, err, built = 1, "", "no transformers 4 environment", {}
        for version in written_for(original):
            environment = envs.environment(version)
            if not environment.ok:
                continue
            compat = {**os.environ, "HF_MODULES_CACHE": str(base / f"hf_modules_{version}"), "HF_HUB_OFFLINE": "1"}
            command = [
                str(environment.python),
                "-c",
                BUILD,
                str(original),
                str(base / "truth.pt"),
                str(base / "outputs.pt"),
            ]
            code, out, err = run(command, compat)
            built = last_json(out)
            if built:
                row["built_on"] = version
                break
        if code or not built:
            row["status"] = "no checkpoint: the original does not build on " + " or ".join(written_for(original))
            row["why"] = (err.strip().splitlines() or ["?"])[-1][:300]
            results.append(row)
            print(json.dumps(row), flush=True)
            continue
        row["class"], auto = built["class"], built["auto"]
        row["original"] = last_json(
            run(
                [sys.executable, "-c", CHECK, str(original), str(base / "truth.pt"), auto, str(base / "outputs.pt")],
                current,
            )[1]
        )
        bare = base / "bare"
        shutil.copytree(
            original, bare, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.index.json", ".saved")
        )
        for label, folder in (("with_weights", original), ("weightless", bare)):
            out_folder = base / f"fixed-{label}"
            code, out, err = run(
                [
                    loadguard,
                    "fix",
                    str(folder),
                    "--out",
                    str(out_folder),
                    "--trust-remote-code",
                    "--workaround",
                    "auto",
                    "--format",
                    "json",
                ],
                current,
            )
            document = last_json(out) if out.strip().startswith("{") else {}
            try:
                document = json.loads(out)
            except ValueError:
                pass
            entry = {"exit": code, "status": document.get("status"), "error": (err.strip().splitlines() or [""])[-2:]}
            entry["refused"] = [
                f"{r['tensor']}: {r['reason'][:160]} ({r['location']})" for r in document.get("refused", [])
            ]
            entry["proofs"] = [f"{p['name']} {p['ok']}: {p['detail'][:200]}" for p in document.get("proofs", [])]
            if out_folder.exists():
                for weights in [*original.glob("*.safetensors"), *original.glob("*.bin")]:
                    if not (out_folder / weights.name).exists():
                        shutil.copy(weights, out_folder / weights.name)
                entry["check"] = last_json(
                    run(
                        [
                            sys.executable,
                            "-c",
                            CHECK,
                            str(out_folder),
                            str(base / "truth.pt"),
                            auto,
                            str(base / "outputs.pt"),
                        ],
                        current,
                    )[1]
                )
                entry["mergeable"] = mergeable(folder, out_folder, auto, current)
            row[label] = entry
        results.append(row)
        print(json.dumps(row), flush=True)
    (workdir / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
