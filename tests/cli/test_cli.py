"""The CLI through its real entry point (loadguard.cli:main), in process."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from loadguard import zoo
from loadguard.cli import main

from ..conftest import IS_V5, TRANSFORMERS_VERSION

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


@pytest.fixture
def run(capsys, monkeypatch):
    def invoke(*args: str, env: dict | None = None):
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        with pytest.raises(SystemExit) as info:
            main(list(args))
        captured = capsys.readouterr()
        return info.value.code, captured.out, captured.err

    return invoke


def fingerprint(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def copy_entry(zoo_folder, name, tmp_path):
    target = tmp_path / name
    shutil.copytree(zoo_folder(name), target)
    return target


def auto(name):
    """The workaround option a zoo entry written for transformers 4 needs here."""
    return ["--workaround", "auto"] if zoo.get(name).workarounds else []


@needs_v5
@pytest.mark.parametrize("name", [e.name for e in zoo.entries() if e.failure_mode])
def test_every_failure_mode_exits_1_with_its_tensors(run, zoo_folder, name):
    code, out, err = run("audit", str(zoo_folder(name)), "--trust-remote-code", *auto(name), "--format", "json")
    assert code == 1
    document = json.loads(out)
    entry = zoo.get(name)
    expected = {f.tensor: f.status for f in entry.expected_for(2)}
    assert {f["tensor"]: f["status"] for f in document["findings"] if f["status"] != "unverifiable"} == expected
    assert document["ok"] is False and document["repair"] is None and document["model"] == str(zoo_folder(name))
    assert all({"tensor", "kind", "check", "status"} <= set(f) for f in document["findings"])


@pytest.mark.parametrize("name", ["clean", "minicpmv_like_fixed"])
def test_clean_entry_exits_0(run, zoo_folder, name):
    code, out, _ = run("audit", str(zoo_folder(name)), "--trust-remote-code", *auto(name), "--format", "json")
    assert code == 0 and json.loads(out)["ok"] is True and json.loads(out)["findings"] == []


@needs_v5
@pytest.mark.parametrize("name", [e.name for e in zoo.entries() if e.load_error])
def test_code_written_for_transformers_4_names_its_workaround(run, zoo_folder, name):
    """Each failure of v4-era code, loaded as plain transformers does (--workaround none): exit 2, one Error, a Hint
    naming the workaround; with it, with auto or with no --workaround (auto: the rule of every command), the audit runs
    and reports what the model really gets wrong."""
    entry = zoo.get(name)
    folder = str(zoo_folder(name))
    code, out, err = run("audit", folder, "--trust-remote-code", "--workaround", "none")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "", err
    assert len(lines) == 2 and lines[0].startswith("Error: the model's own code failed"), err
    assert entry.load_error.split(": ")[0] in lines[0]
    assert (
        lines[1]
        == f"Hint: known failure of code written for older transformers/torch: run again with --workaround {entry.needed_workarounds[0]} (or --workaround auto)"
    )
    expected = {f.tensor: f.status for f in entry.expected_for(2)}
    # named: those this transformers makes unnecessary are stale (the model's code uses what they give back)
    named = [(w, "applied" if w in entry.needed_workarounds else "stale") for w in entry.workarounds]
    for option, outcomes in (
        ([f"--workaround={w}" for w in entry.workarounds], named),
        (["--workaround", "auto"], [(w, "applied") for w in entry.needed_workarounds]),
        ([], [(w, "applied") for w in entry.needed_workarounds]),
    ):
        code, out, err = run("audit", folder, "--trust-remote-code", *option, "--format", "json")
        document = json.loads(out)
        assert code == (1 if expected else 0), err
        assert {f["tensor"]: f["status"] for f in document["findings"] if f["status"] != "unverifiable"} == expected
        assert [(w["name"], w["status"]) for w in document["workarounds"] if w["stage"] == "before_import"] == outcomes
    code, out, err = run("audit", folder, "--trust-remote-code", "--workaround", "auto")
    assert "(auto: the load failed with the model's own code failed" in out


def test_real_minilm_checkpoint_exits_0(run, minilm_folder):
    code, out, err = run("audit", str(minilm_folder))
    assert code == 0, err
    assert "clean" in out and "checkpoint_fidelity    103 checked, 0 failed" in out


@needs_v5
def test_repair_reports_and_never_writes_to_path(run, zoo_folder):
    folder = zoo_folder("shared_buffer")
    before = fingerprint(folder)
    code, out, _ = run("audit", str(folder), "--trust-remote-code", "--repair", "--format", "json")
    assert code == 0  # every finding repaired, the re-audit clean (ruff's --fix convention)
    document = json.loads(out)
    repair = document["repair"]
    assert repair["ok"] is True and document["ok"] is False  # the model as loaded was broken
    code, out, _ = run(
        "audit", str(folder), "--trust-remote-code", "--repair", "--exit-non-zero-on-repair", "--format", "json"
    )
    assert code == 1
    assert set(repair["repaired"]) == {
        "positions.table",
        "positions.index",
        "layers.0.attn.causal_mask",
        "layers.1.attn.causal_mask",
    }
    assert fingerprint(folder) == before


@needs_v5
def test_human_output_collapses_layers_and_hints(run, zoo_folder):
    code, out, err = run("audit", str(zoo_folder("np_buffer")), "--trust-remote-code")
    assert code == 1
    assert "layers.{0...1}.attn.causal_mask" in out
    assert "non_persistent_buffer  4 checked, 4 failed" in out
    assert "\x1b[" not in out  # no colour when not a terminal
    assert err.strip().splitlines()[-1].startswith("Hint: run again with --repair")
    code, out, err = run("audit", str(zoo_folder("np_buffer")), "--trust-remote-code", "--repair")
    assert "after repair: clean" in out and "_init_weights" in err


def test_no_poison_audits_the_load_as_it_is(run, zoo_folder):
    # without poison the buffer holds whatever memory the allocator handed back: usually garbage, but it
    # can be a freed copy of the right table; the audit must report exactly what is there
    code, out, _ = run(
        "audit",
        str(zoo_folder("minicpmv_like")),
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--no-poison",
        "--format",
        "json",
    )
    tensors = [f["tensor"] for f in json.loads(out)["findings"]]
    assert tensors in ([], ["resampler.pos_embed"]) and code == (1 if tensors else 0)


def bad_inputs(zoo_folder, tmp_path):
    cases = {}
    cases["missing path"] = ([str(tmp_path / "nope")], "does not exist")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases["no config"] = ([str(empty)], "has no config.json")
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    cases["unknown architecture"] = ([str(unknown)], "architecture")
    cases["untrusted remote code"] = (
        [str(copy_entry(zoo_folder, "clean", tmp_path))],
        "configuration_lgtoy.py, modeling_lgtoy.py",
    )
    cases["import error"] = (
        [str(copy_entry(zoo_folder, "typing_alias", tmp_path)), "--trust-remote-code", "--workaround", "none"],
        "modeling_lgtyping.py, line 14: NameError: name 'List' is not defined",
    )
    corrupt = copy_entry(zoo_folder, "clean", tmp_path / "c")
    (corrupt / "model.safetensors").write_bytes(b"\xff" * 64)
    cases["corrupt safetensors"] = ([str(corrupt), "--trust-remote-code"], "not a readable safetensors file")
    truncated = copy_entry(zoo_folder, "clean", tmp_path / "t")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    cases["truncated safetensors"] = ([str(truncated), "--trust-remote-code"], "is truncated")
    sharded = copy_entry(zoo_folder, "sharded", tmp_path)
    (sharded / "model-00002-of-00003.safetensors").unlink()
    cases["missing shard"] = (
        [str(sharded), "--trust-remote-code"],
        "names shard model-00002-of-00003.safetensors, which is missing",
    )
    cases["hub id offline"] = (["someone/some-model"], "cannot be reached")
    cases["cuda without gpu"] = (
        [str(zoo_folder("clean")), "--trust-remote-code", "--device", "cuda"],
        "no usable CUDA GPU",
    )
    cases["bad dtype"] = ([str(zoo_folder("clean")), "--trust-remote-code", "--dtype", "float8"], "not a dtype")
    return cases


CASES = [
    "missing path",
    "no config",
    "unknown architecture",
    "untrusted remote code",
    "import error",
    "corrupt safetensors",
    "truncated safetensors",
    "missing shard",
    "hub id offline",
    "cuda without gpu",
    "bad dtype",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_error_and_one_hint_exit_2(run, zoo_folder, tmp_path, case):
    args, message = bad_inputs(zoo_folder, tmp_path)[case]
    if case == "cuda without gpu":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    before = {p: fingerprint(p) for p in tmp_path.rglob("*") if p.is_dir()}
    code, out, err = run("audit", *args, env={"HF_HUB_OFFLINE": "1"})
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("Loading ")]
    assert code == 2, err
    assert out == ""
    assert len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("Hint: "), err
    assert message in " ".join(err.split()), err
    assert "Traceback" not in err
    assert {p: fingerprint(p) for p in tmp_path.rglob("*") if p.is_dir()} == before  # nothing written


def test_debug_shows_the_traceback(run, tmp_path):
    code, _, err = run("audit", str(tmp_path / "nope"), env={"LOADGUARD_DEBUG": "1"})
    assert code == 2 and "Traceback" in err and "ModelNotFoundError" in err


@needs_v5
def test_demo_tells_the_story(run):
    code, out, err = run("demo")  # under poison by default: deterministic garbage, NaN, so every output is "!!!!"
    assert code == 0, err
    assert "resampler.pos_embed" in out and "np buffer" in out and "uninitialized" in out
    assert "repaired: resampler.pos_embed; re-audit: clean" in out
    assert "!!!!!!!!" in out
    assert "as loaded: 4 of 4 outputs wrong; repaired: equal to the fixed model: True" in out
    entry = zoo.get("minicpmv_like")  # what its v4-era code meets first depends on the versions installed
    assert entry.load_error in out
    assert (
        f"Hint: known failure of code written for older transformers/torch: run again with --workaround {entry.needed_workarounds[0]}"
        in out
    )
    for name in entry.needed_workarounds:
        assert f"workaround {name}: applied (auto: the load failed with" in out
    assert 'loadguard.load("AutoModelForCausalLM", path, trust_remote_code=True, workarounds="auto")' in out
    rules = [line for line in out.splitlines() if line.startswith("────")]
    assert len(rules) >= 6 and max(map(len, rules)) <= 100  # a log gets tables one row a line, not rules 100k wide


@needs_v5
def test_demo_with_a_plain_load(run):
    code, out, err = run(
        "demo", "--no-poison"
    )  # whatever memory the load left: the repair must still match the fixed model
    assert code == 0, err
    assert "repaired: resampler.pos_embed; re-audit: clean" in out or "audit clean" in out
    assert "repaired: equal to the fixed model: True" in out


def test_env_measures_the_installed_transformers(run):
    code, out, _ = run("env", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["versions"]["transformers"] == TRANSFORMERS_VERSION
    test = document["self_test"]
    assert test["ran"] and test["preserves_non_persistent_buffers"] is (not IS_V5)
    code, out, _ = run("env")
    assert (
        "- torch: " in out and "non-persistent buffers survive from_pretrained: " + ("NO" if IS_V5 else "yes") in out
    )


def test_env_works_without_an_optional_dependency(tmp_path):
    import subprocess
    import sys

    script = "import sys; sys.modules['accelerate'] = None; sys.modules['PIL'] = None\nfrom loadguard.cli import main; main(['env'])"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "non-persistent buffers survive from_pretrained" in result.stdout


def test_zoo_list_and_build(run, tmp_path):
    code, out, _ = run("zoo", "list", "--format", "json")
    names = [e["name"] for e in json.loads(out)]
    assert code == 0 and names == [e.name for e in zoo.entries()]
    code, out, err = run("zoo", "build", "clean", str(tmp_path / "m"), "--set", "hidden_size=48")
    assert code == 0 and out.strip() == str(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["hidden_size"] == 48
    code, _, err = run("zoo", "build", "nope", str(tmp_path / "x"))
    assert code == 2 and "no zoo entry called 'nope'" in err and not (tmp_path / "x").exists()


@needs_v5
def test_compare_shows_the_divergence_and_repair_agrees(run, zoo_folder):
    folder = str(zoo_folder("minicpmv_like"))
    code, out, err = run("compare", folder, "--trust-remote-code", "--workaround", "auto", "--format", "json")
    document = json.loads(out)
    assert code == 1 and document["ok"] is False and "non-finite logprob" in document["failure"]
    assert all(a["text"] == "!!!!!!!!" and len(a["ids"]) == 8 for a in document["a"])
    assert all(len(b["ids"]) == 8 and "!" not in b["text"] for b in document["b"])
    code, out, _ = run("compare", folder, "--trust-remote-code", "--workaround", "auto", "--repair")
    assert (
        code == 0
        and "agree (check_logprobs_close)" in out
        and "repaired before generating: resampler.pos_embed" in out
    )
    code, out, _ = run(
        "compare", folder, "--trust-remote-code", "--workaround", "auto", "--repair", "--exit-non-zero-on-repair"
    )
    assert code == 1 and "agree (check_logprobs_close)" in out  # a repair was needed: the gate fails


def test_compare_clean_text_model_with_prompts(run, zoo_folder):
    code, out, _ = run(
        "compare", str(zoo_folder("clean")), "--trust-remote-code", "--prompt", "what do you see ?", "--format", "json"
    )
    document = json.loads(out)
    assert code == 0 and document["prompts"] == ["what do you see ?"] and document["a"] == document["b"]


@needs_v5
def test_trace_command(run, zoo_folder):
    code, out, _ = run(
        "trace", str(zoo_folder("minicpmv_like")), "--trust-remote-code", "--workaround", "auto", "--format", "json"
    )
    document = json.loads(out)
    assert (
        code == 1
        and document["module"] == "resampler.attn"
        and document["non_finite_tensors"] == ["resampler.pos_embed"]
    )
    code, out, _ = run("trace", str(zoo_folder("minicpmv_like")), "--trust-remote-code", "--workaround", "auto")
    lines = out.splitlines()  # loadguard's own line breaks are line breaks, not a literal \n (issue 45, class 7)
    assert code == 1 and "\\n" not in out and len(lines) > 1 and any("resampler.pos_embed" in line for line in lines)
    code, out, _ = run("trace", str(zoo_folder("minicpmv_like_fixed")), "--trust-remote-code", "--workaround", "auto")
    assert code == 0 and "stayed finite" in out


def _kernels_by_default() -> bool:
    """transformers 5.25 made hub kernels the default of from_pretrained (and the kernels package a dependency)."""
    from packaging.version import Version

    return Version(TRANSFORMERS_VERSION) >= Version("5.25.0")


@pytest.mark.skipif(
    not _kernels_by_default(), reason=f"transformers {TRANSFORMERS_VERSION} does not kernelize by default"
)
def test_missing_kernels_package_is_an_error_with_the_ways_out(run, zoo_folder, monkeypatch):
    import transformers.modeling_utils

    monkeypatch.setattr(transformers.modeling_utils, "is_kernels_available", lambda: False)  # as without the package
    code, out, err = run("audit", str(zoo_folder("clean")), "--trust-remote-code")
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("Loading ")]
    assert code == 2 and out == "" and len(lines) == 2, err
    assert lines[0].startswith(
        f"Error: transformers {TRANSFORMERS_VERSION} loads with hub kernels by default and the kernels package is missing"
    )
    assert "pip install 'kernels" in lines[1] and "USE_HUB_KERNELS=NO" in lines[1] and "use_kernels=False" in lines[1]
    code, out, err = run(
        "audit", str(zoo_folder("clean")), "--trust-remote-code", env={"USE_HUB_KERNELS": "NO"}
    )  # the way out it names
    assert code == 0, err
    # a scan never kernelizes (kernels swap layers' code, never tensors, and refuse the meta device), and says so
    code, out, err = run("scan", str(zoo_folder("np_buffer")), "--trust-remote-code", "--format", "json")
    document = json.loads(out)
    assert code == 1 and document["scanned"] and "hub kernels not applied" in document["method"], err


@needs_v5
def test_untied_v4_list_ties_fail_and_repair_reties_them(run, zoo_folder):
    """An encoder-decoder whose v4 list-style tied embeddings are absent from its checkpoint: transformers 5 leaves
    them untied, holding random init, and its loading report is clean. The audit names both; repair ties them again,
    and the repaired model computes what the correctly tied model computes."""
    import torch

    import loadguard

    folder = str(zoo_folder("v4_tied_list"))
    code, out, err = run("audit", folder, "--trust-remote-code", "--repair", "--format", "json")
    document = json.loads(out)
    tied = {f["tensor"]: (f["check"], f["status"]) for f in document["findings"] if f["check"] == "tied_weights"}
    assert code == 0 and tied == {
        name: ("tied_weights", "mismatch") for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    }
    assert "declared tied to shared.weight (v4 list)" in next(
        f["detail"] for f in document["findings"] if f["check"] == "tied_weights"
    )
    assert document["repair"]["ok"] is True
    model = loadguard.load("AutoModelForCausalLM", folder, trust_remote_code=True, poison=True)
    assert (
        model.encoder.embed_tokens.weight is model.shared.weight is model.decoder.embed_tokens.weight
    )  # the same tensor again
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    assert torch.equal(model(ids).logits, zoo.build_model("v4_tied_list")(ids).logits)


def test_machine_output_stays_machine_output_when_model_code_prints(zoo_folder, tmp_path):
    """A model whose code prints (at import, as some remote code does): with --format json stdout holds only our
    document; what the model printed goes to stderr."""
    import subprocess
    import sys

    folder = tmp_path / "chatty"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    modeling.write_text(
        modeling.read_text() + '\nprint("loading the chatty model")\nimport os\nos.write(1, b"raw bytes on fd 1\\n")\n'
    )
    for command in (
        ["audit", str(folder), "--trust-remote-code", "--format", "json"],
        ["scan", str(folder), "--trust-remote-code", "--format", "json"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "loadguard", *command], capture_output=True, text=True, timeout=300
        )
        assert result.returncode in (0, 1), result.stderr
        json.loads(result.stdout)  # nothing but the document
        assert "loading the chatty model" in result.stderr and "raw bytes on fd 1" in result.stderr


@needs_v5
def test_an_auto_map_naming_only_a_removed_auto_class(run, zoo_folder, tmp_path):
    """auto_map's only model entry is AutoModelForVision2Seq (gone in 5.x): exit 2 naming the workaround; with it, the
    load goes through the class the entry names and the audit reports what the model really gets wrong."""
    folder = tmp_path / "vision2seq"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": config["auto_map"]["AutoConfig"],
        "AutoModelForVision2Seq": config["auto_map"]["AutoModelForCausalLM"],
    }
    (folder / "config.json").write_text(json.dumps(config))
    code, out, err = run("audit", str(folder), "--trust-remote-code", "--workaround", "none")
    assert code == 2 and "auto_map names only auto classes this transformers removed (AutoModelForVision2Seq)" in err
    assert "--workaround v4-removed-auto-classes" in err
    code, out, err = run("audit", str(folder), "--trust-remote-code", "--workaround", "auto", "--format", "json")
    document = json.loads(out)
    assert code == 1 and {w["name"]: w["status"] for w in document["workarounds"]} == {
        "v4-removed-auto-classes": "applied"
    }
    assert sorted(f["tensor"] for f in document["findings"] if f["status"] == "uninitialized") == sorted(
        f.tensor for f in zoo.get("np_buffer").expected_for(2)
    )
    code, out, err = run("scan", str(folder), "--trust-remote-code", "--workaround", "auto", "--format", "json")
    assert code == 1 and json.loads(out)["scanned"]


@pytest.mark.parametrize("command", [["audit"], ["scan"], ["matrix"], ["workarounds", "list"]])
def test_workarounds_from_runs_no_code_for_help_or_a_usage_error(command, tmp_path, capsys):
    """An option that executes a file acts only when the command runs: `--workarounds-from FILE --help` used to execute
    FILE before printing the help."""
    from loadguard.cli import main

    marker = tmp_path / "ran"
    code_file = tmp_path / "mine.py"
    code_file.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    for extra in (["--help"], ["--no-such-option"]):
        with pytest.raises(SystemExit):
            main([*command, "--workarounds-from", str(code_file), *extra])
    capsys.readouterr()
    assert not marker.exists()


def test_a_matrix_cell_passes_the_model_after_double_dash(tmp_path):
    matrix_module = importlib.import_module("loadguard._matrix.matrices")

    for full in (False, True):
        arguments = matrix_module._arguments("-looks-like-an-option", full, ["--trust-remote-code", "--keys=auto"])
        assert arguments[-2:] == ["--", "-looks-like-an-option"] and arguments[0] == ("audit" if full else "scan")
        assert ("--keys=auto" in arguments) is (not full)


@needs_v5
def test_transformers_warnings_are_kept_back_unless_verbose(run, zoo_folder):
    folder = str(zoo_folder("v4_rope_scaling"))
    code, out, err = run("audit", folder, "--trust-remote-code", "--workaround", "auto")
    assert code == 1
    assert "FutureWarning" not in err and "Loading weights" not in err
    assert "warning(s) from transformers or the model's code not shown: --verbose shows them" in err
    # pytest shows no Python warning on stderr itself: a real process does
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadguard",
            "audit",
            folder,
            "--trust-remote-code",
            "--workaround",
            "auto",
            "--verbose",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 1
    assert "FutureWarning: `rope_scaling` is deprecated" in shown.stderr and "not shown" not in shown.stderr


@needs_v5
def test_a_finding_a_warning_explains_quotes_it(run, zoo_folder):
    code, out, _ = run("audit", str(zoo_folder("missing_key")), "--trust-remote-code", "--format", "json")
    (finding,) = [f for f in json.loads(out)["findings"] if f["tensor"] == "logit_scale"]
    assert (
        "transformers said: logit_scale MISSING: those params were newly initialized because missing from the checkpoint"
        in finding["detail"]
    )
    code, out, _ = run("audit", str(zoo_folder("np_buffer_in_checkpoint")), "--trust-remote-code", "--format", "json")
    mask = next(f for f in json.loads(out)["findings"] if f["tensor"] == "layers.1.attn.causal_mask")
    assert (
        "transformers said: layers.{0, 1}.attn.causal_mask UNEXPECTED" in mask["detail"]
    )  # its folded name, unfolded to match


def test_explaining_matches_whole_names_only():
    from loadguard._hf.noise import explaining

    report = "LOAD REPORT\nKey | Status |\nlayers.{0, 12}.mask | MISSING |\nscale | UNEXPECTED |\n\nNotes:\n- MISSING:\tnewly initialized."
    assert explaining("layers.12.mask", [report]) == "layers.{0, 12}.mask MISSING: newly initialized."
    assert explaining("layers.1.mask", [report]) is None
    assert explaining("logit_scale", [report]) is None and explaining("scale", [report]) == "scale UNEXPECTED"


@needs_v5
def test_tables_keep_one_row_a_line_in_a_log(run, zoo_folder):
    folder = str(zoo_folder("v4_tied_list"))
    code, out, _ = run("audit", folder, "--trust-remote-code", "--workaround", "auto")
    assert code == 1
    (row,) = [line for line in out.splitlines() if line.startswith("│ decoder.embed_tokens.weight")]
    assert "tied_weights" in row and "mismatch" in row and row.rstrip().endswith("│")
    (detail,) = [line for line in out.splitlines() if line.startswith("decoder.embed_tokens.weight:")]
    assert "never tied)" in detail  # one line, however long
    assert all(
        line.startswith(("┏", "┃", "┡", "│", "└")) for line in out.split("\n┏", 1)[-1].split("┘")[0].splitlines()[1:]
    )


def test_global_options_are_accepted_anywhere_before_the_double_dash():
    from loadguard.cli import _hoist_globals

    arguments, settings = _hoist_globals(["scan", "x", "--verbose", "--color=never", "--quiet", "--", "--verbose"])
    assert arguments == ["--verbose", "--quiet", "--color", "never", "scan", "x", "--", "--verbose"]
    assert settings == {"verbose": True, "quiet": True, "color": "never"}
    assert _hoist_globals(["audit", "m", "--color", "always"])[1]["color"] == "always"


@needs_v5
def test_quiet_keeps_only_results_errors_and_hints(run, zoo_folder):
    folder = str(zoo_folder("v4_rope_scaling"))
    code, out, err = run("audit", folder, "--trust-remote-code", "--workaround", "auto", "--quiet")
    assert code == 1 and "positions.index" in out
    assert "not shown" not in err and "Loading" not in err and err.startswith("Hint:")


def test_from_files_take_comments_and_blank_lines(run, zoo_folder, tmp_path):
    listing = tmp_path / "models.txt"
    listing.write_text(
        f"# the models we cover\n\n{zoo_folder('clean')}   # the clean one\n\t\n{zoo_folder('declined_tie')}\n"
    )
    code, out, _ = run("scan", "--from", str(listing), "--trust-remote-code", "--format", "json")
    assert code == 0 and [json.loads(line)["model"] for line in out.splitlines()] == [
        str(zoo_folder("clean")),
        str(zoo_folder("declined_tie")),
    ]


def test_color_never_and_no_color_print_no_escape_codes(tmp_path):
    env = {**os.environ, "FORCE_COLOR": "1"}
    import re

    done = subprocess.run(
        [sys.executable, "-m", "loadguard", "zoo", "list", "--color", "never"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and "\x1b[" not in done.stdout  # no escape code at all
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", "zoo", "list"],
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1"},
        timeout=120,
    )
    assert done.returncode == 0 and not re.search(
        r"\x1b\[(?:3|9)\d", done.stdout
    )  # NO_COLOR: no color (bold may stay, as its spec says)
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", "--color", "always", "zoo", "list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "\x1b[" in done.stdout
