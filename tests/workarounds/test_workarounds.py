"""Workarounds prove they are needed, go stale when they are not, fail loudly when they stop applying, and are
named by the failures they fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import loadguard
from loadguard import _audit, zoo
from loadguard import workarounds as registry
from loadguard.compare import check_logprobs_close, check_outputs_equal
from loadguard.errors import RemoteCodeImportError, StaleWorkaroundError, WorkaroundError
from loadguard.runner import HfRunner, default_cases

from ..conftest import IS_V5, TRANSFORMERS_VERSION, chained, load

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not need these workarounds")
IMPORT = list(zoo.get("minicpmv_like").workarounds)  # what MiniCPM-V-2.6-era code needs to import and construct
NEEDED = list(
    zoo.get("minicpmv_like").needed_workarounds
)  # those this transformers / torch lacks what they give back for
MINICPMV = IMPORT + ["minicpmv-pos-cache", "minicpmv-26-runner"]
V4_ENTRIES = [e.name for e in zoo.entries() if e.load_error and e.family != "lgminicpmv"]


def named_outcome(name: str) -> str:
    """What a workaround named for minicpmv_like does here: applied where needed, stale where the running
    transformers has what it gives back again (the model's code uses it)."""
    return "applied" if name in NEEDED or registry.get(name).stage != "before_import" else "stale"


def outcomes(model):
    return {w.name: w for w in model.loadguard_report.workarounds}


def expected(name):
    return {f.tensor: f.status for f in zoo.get(name).expected_for(2)}


@needs_v5
def test_pos_cache_applied_where_needed(zoo_folder):
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("minicpmv_like"),
        trust_remote_code=True,
        poison=True,
        workarounds=IMPORT + ["minicpmv-pos-cache"],
    )
    outcome = outcomes(model)["minicpmv-pos-cache"]
    assert outcome.status == "applied" and outcome.fixed == 1 and outcome.detail == "fixed resampler.pos_embed"
    assert model.loadguard_report.ok and not model.loadguard_report_as_loaded.ok
    assert model.loadguard_repair is None  # the workaround fixed it: nothing left for the generic repair
    assert {name: outcomes(model)[name].status for name in IMPORT} == {name: named_outcome(name) for name in IMPORT}


def test_pos_cache_is_stale_on_the_fixed_model_and_strict_errors(zoo_folder):
    folder = zoo_folder("minicpmv_like_fixed")
    model = loadguard.load(
        "AutoModelForCausalLM", folder, trust_remote_code=True, poison=True, workarounds=["auto", "minicpmv-pos-cache"]
    )
    outcome = outcomes(model)["minicpmv-pos-cache"]
    assert outcome.status == "stale"
    assert outcome.detail == (
        f"transformers {TRANSFORMERS_VERSION} preserves resampler.pos_embed; remove workaround minicpmv-pos-cache, upstream transformers#48892"
    )
    with pytest.raises(StaleWorkaroundError, match="stale workaround: transformers .* preserves resampler.pos_embed"):
        loadguard.load(
            "AutoModelForCausalLM",
            folder,
            trust_remote_code=True,
            workarounds=["auto", "minicpmv-pos-cache"],
            strict_stale=True,
        )


def test_pos_cache_on_a_model_without_a_resampler_errors(zoo_folder):
    with pytest.raises(WorkaroundError, match="does not apply to .*lgtoy.*it is for minicpmv"):
        loadguard.load(
            "AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=["minicpmv-pos-cache"]
        )
    # a MiniCPM-V whose code changed: the resampler is gone, the workaround must not pass silently
    model = load(zoo_folder("minicpmv_like"))
    del model.resampler
    with pytest.raises(WorkaroundError, match="found nothing to fix"):
        _audit.after_load(model, registry.resolve(["minicpmv-pos-cache"]))


def test_applied_and_fixed_nothing_is_an_error(zoo_folder):
    @registry.workaround(
        "test-does-nothing",
        applies_to=["lgtoy"],
        stage="after_load",
        reason="test",
        upstream="none#0",
        targets=lambda m: ["positions.table"],
    )
    def does_nothing(model):
        return 0

    try:
        with loadguard.poison():
            model = load(zoo_folder("np_buffer"))
        if not IS_V5:
            pytest.skip(f"transformers {TRANSFORMERS_VERSION} leaves nothing broken to fix")
        with pytest.raises(WorkaroundError, match="test-does-nothing applied to .* and fixed nothing"):
            _audit.after_load(model, registry.resolve(["test-does-nothing"]))
    finally:
        registry.REGISTRY.pop("test-does-nothing")


def test_unknown_workaround(zoo_folder):
    with pytest.raises(WorkaroundError, match="no workaround called 'nope'") as info:
        loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds=["nope"])
    assert "minicpmv-pos-cache" in info.value.hint and "--workarounds-from" in info.value.hint
    with pytest.raises(ValueError, match="reserved"):
        registry.workaround("auto", applies_to=["x"], stage="before_import", reason="", upstream="")


@pytest.mark.parametrize("name", [e.name for e in zoo.entries() if e.load_error])
def test_each_failure_signature_names_exactly_its_workaround(name):
    """The exception each zoo entry's code raises on transformers 5 is declared by exactly the workaround that
    fixes it (the first of the entry's list: the others fix what fails after it)."""
    import builtins

    entry = zoo.get(name)
    kind, _, message = entry.load_error.partition(": ")
    error = KeyError(message.strip("'")) if kind == "KeyError" else getattr(builtins, kind)(message)
    assert str(error) == message
    assert [w.name for w in registry.matching(error)] == [entry.needed_workarounds[0]]


def test_a_match_is_found_through_the_exception_chain():
    outer = chained(RuntimeError("while importing the model"), NameError("name 'Optional' is not defined"))
    assert [w.name for w in registry.matching(outer)] == ["remote-code-typing-aliases"]
    assert (
        registry.matching(KeyError("typo")) == [] and registry.matching(NameError("name 'foo' is not defined")) == []
    )


@needs_v5
@pytest.mark.parametrize("name", V4_ENTRIES)
def test_api_error_names_the_workaround_and_auto_applies_it(zoo_folder, name):
    entry = zoo.get(name)
    with pytest.raises(RemoteCodeImportError) as info:
        loadguard.load("AutoModelForCausalLM", zoo_folder(name), trust_remote_code=True)
    assert info.value.fixes == entry.needed_workarounds
    assert (
        f"workarounds={list(entry.needed_workarounds)!r}" in info.value.hint
        and "workarounds='auto'" in info.value.hint
    )
    model = loadguard.load(
        "AutoModelForCausalLM", zoo_folder(name), trust_remote_code=True, poison=True, workarounds="auto"
    )
    (outcome,) = model.loadguard_report.workarounds
    assert (outcome.name, outcome.status) == (entry.needed_workarounds[0], "applied") and outcome.fixed >= 1
    assert outcome.auto.startswith("auto: the load failed with the model's own code failed")
    assert {f.tensor: f.status for f in model.loadguard_report_as_loaded.failures} == expected(
        name
    )  # what it really gets wrong
    assert model.loadguard_repair.ok
    document = json.loads(model.loadguard_report.to_json())
    assert document["workarounds"][0]["auto"] == outcome.auto


@needs_v5
def test_auto_retries_once_per_newly_matched_failure_minicpmv(zoo_folder):
    model = loadguard.load(
        "AutoModelForCausalLM", zoo_folder("minicpmv_like"), trust_remote_code=True, poison=True, workarounds="auto"
    )
    applied = [(w.name, w.status) for w in model.loadguard_report.workarounds]
    assert applied == [(name, "applied") for name in NEEDED]  # in the order the code failed
    reasons = {w.name: w.auto for w in model.loadguard_report.workarounds}
    for name, error in zoo.get("minicpmv_like").failures:
        if name in NEEDED:
            assert error.split(": ", 1)[1].split("'")[0] in reasons[name], reasons
    assert [f.tensor for f in model.loadguard_report_as_loaded.failures] == ["resampler.pos_embed"]


def test_auto_on_code_that_loads_applies_nothing(zoo_folder):
    model = loadguard.load("AutoModelForCausalLM", zoo_folder("clean"), trust_remote_code=True, workarounds="auto")
    assert model.loadguard_report.workarounds == () and model.loadguard_report.ok


@pytest.mark.parametrize("name", [w.name for w in registry.all_workarounds() if w.stage == "before_import"])
def test_a_workaround_the_model_never_hits_is_not_applicable(zoo_folder, name):
    """The clean zoo model's code uses none of what the v4-era workarounds give back: 'not applicable' on every
    transformers (never 'stale': it never needed them), and strict mode has nothing to object to."""
    for strict in (False, True):
        model = loadguard.load(
            "AutoModelForCausalLM",
            zoo_folder("clean"),
            trust_remote_code=True,
            workarounds=[name],
            strict_stale=strict,
        )
        outcome = outcomes(model)[name]
        assert (outcome.status, outcome.fixed) == ("not_applicable", 0) and outcome.detail.startswith(
            "not applicable to "
        )
        assert json.loads(model.loadguard_report.to_json())["workarounds"][0]["status"] == "not_applicable"


@pytest.mark.parametrize("native", [True, False])
def test_stale_means_the_model_used_it_and_this_transformers_has_it_again(zoo_folder, native):
    """A before_import workaround that changed nothing: stale only where the model's code uses what it gives back
    and the running versions have that again; where they lack it, the load never reached it."""
    import contextlib

    uses = r"class LgToyForCausalLM"  # in np_buffer's code, not in minicpmv_like's

    @registry.workaround(
        "test-native-thing",
        applies_to=lambda config: True,
        stage="before_import",
        reason="test",
        upstream="test#1",
        native=lambda: native,
        touches=uses,
    )
    @contextlib.contextmanager
    def thing(path, config):
        yield registry.Usage()

    try:
        for entry, touched in (("np_buffer", True), ("minicpmv_like", False)):
            with registry.using(["test-native-thing"], zoo_folder(entry)) as found:
                pass
            expected_status = "stale" if native and touched else "not_applicable"
            assert [o.status for o in found] == [expected_status], (entry, found)
            if expected_status == "stale":
                with pytest.raises(StaleWorkaroundError):
                    with registry.using(["test-native-thing"], zoo_folder(entry), strict=True):
                        pass
        assert registry.judge_before_import(
            registry.get("test-native-thing"), registry.model_code(zoo_folder("np_buffer"))
        ).startswith("stale: " if native else "needed: ")
    finally:
        registry.REGISTRY.pop("test-native-thing", None)


@needs_v5
def test_typing_aliases_make_the_import_work_and_restore_torch(zoo_folder):
    import torch.nn.functional as functional

    with pytest.raises(loadguard.LoadguardError, match="NameError: name 'List' is not defined"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("typing_alias"), trust_remote_code=True)
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("typing_alias"),
        trust_remote_code=True,
        workarounds=["remote-code-typing-aliases"],
        poison=True,
    )
    outcome = outcomes(model)["remote-code-typing-aliases"]
    assert outcome.status == "applied" and outcome.fixed == 1 and "List" in outcome.detail
    assert {f.tensor for f in model.loadguard_report_as_loaded.failures} == set(expected("typing_alias"))
    assert not hasattr(functional, "List")  # global state restored
    # the import is not left cached in-process: the next plain load fails as it would in a fresh process
    with pytest.raises(loadguard.LoadguardError, match="NameError"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("typing_alias"), trust_remote_code=True)


@needs_v5
def test_v4_tied_weights_keys(zoo_folder):
    from transformers import PreTrainedModel

    with pytest.raises(loadguard.LoadguardError, match="all_tied_weights_keys"):
        loadguard.load("AutoModelForCausalLM", zoo_folder("v4_tied_weights"), trust_remote_code=True)
    model = loadguard.load(
        "AutoModelForCausalLM",
        zoo_folder("v4_tied_weights"),
        trust_remote_code=True,
        poison=True,
        workarounds=["v4-tied-weights-keys"],
    )
    assert outcomes(model)["v4-tied-weights-keys"].status == "applied"
    assert (
        model.loadguard_report_as_loaded.summary("checkpoint_fidelity").failed == 0
    )  # every weight from the checkpoint
    assert "all_tied_weights_keys" not in PreTrainedModel.__dict__  # the bridge is gone after the load
    model(torch.tensor([[10, 11, 12]]))


@needs_v5
def test_using_restores_every_global_it_touches(zoo_folder):
    import torch.nn.functional as functional
    import transformers.models.llama.modeling_llama as llama
    import transformers.utils
    from transformers import PretrainedConfig, PreTrainedModel

    rope = PretrainedConfig.__dict__["rope_scaling"]
    names = [n for n in registry.REGISTRY if registry.get(n).stage == "before_import"]
    native_mask_utils = registry.get("v4-attn-mask-utils").is_native()  # 5.25 has the module back
    with registry.using(names, zoo_folder("minicpmv_like")) as outcomes_:
        assert "transformers.modeling_attn_mask_utils" in sys.modules
        from transformers.utils import is_torch_fx_available  # noqa: F401  (now importable)
    assert len(outcomes_) == len(names)
    assert ("transformers.modeling_attn_mask_utils" in sys.modules) is native_mask_utils
    assert "__getattr__" not in transformers.utils.__dict__ and "__getattr__" not in llama.__dict__
    assert PretrainedConfig.__dict__["rope_scaling"] is rope and "max_length" not in PretrainedConfig.__dict__
    assert not hasattr(functional, "List") and "all_tied_weights_keys" not in PreTrainedModel.__dict__


def test_runner_workaround_is_needed_for_minicpmv_and_not_applied_elsewhere(zoo_folder):
    folder = zoo_folder("minicpmv_like_fixed")
    prompts, images = default_cases(folder)
    with HfRunner(folder, trust_remote_code=True, workarounds="auto", auto_workarounds=False) as hf:
        with pytest.raises(AttributeError, match="convert_tokens_to_ids"):  # its generate needs tokenizer=
            hf.generate_greedy(prompts[:1], 2, images=images[:1])
    with HfRunner(
        folder, trust_remote_code=True, workarounds=["auto", "minicpmv-26-runner"], auto_workarounds=False
    ) as hf:
        ((ids, text),) = hf.generate_greedy(prompts[:1], 2, images=images[:1])
        assert len(ids) == 2 and [w.status for w in hf.workarounds if w.stage == "runner"] == ["applied"]
    with HfRunner(zoo_folder("clean"), trust_remote_code=True) as hf:
        assert hf.workarounds == []  # the automatic runner workarounds apply only where they apply
    with pytest.raises(WorkaroundError, match="does not apply"):
        HfRunner(zoo_folder("clean"), trust_remote_code=True, workarounds=["minicpmv-26-runner"])


@needs_v5
def test_done_when_runner_with_minicpmv_workarounds_equals_the_fixed_variant(zoo_folder):
    prompts, images = default_cases(zoo_folder("minicpmv_like"))
    with HfRunner(
        zoo_folder("minicpmv_like"), trust_remote_code=True, poison=True, audit="raise", workarounds=MINICPMV
    ) as hf:
        got = hf.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
        greedy = hf.generate_greedy(prompts, 8, images=images)
        statuses = {w.name: w.status for w in hf.report.workarounds}
    assert statuses == {name: named_outcome(name) for name in MINICPMV}
    with HfRunner(zoo_folder("minicpmv_like_fixed"), trust_remote_code=True, workarounds=MINICPMV) as fixed:
        want = fixed.generate_greedy_logprobs_limit(prompts, 8, 5, images=images)
        assert {w.name: w.status for w in fixed.workarounds}["minicpmv-pos-cache"] == "stale"
    assert got == want  # same tokens, text and logprobs, exactly
    assert all(len(ids) == 8 for ids, _, _ in got)
    check_logprobs_close(
        outputs_0_lst=got, outputs_1_lst=want, name_0="workarounds", name_1="fixed", check_lengths=True
    )
    check_outputs_equal(
        outputs_0_lst=greedy, outputs_1_lst=[(i, t) for i, t, _ in want], name_0="workarounds", name_1="fixed"
    )


# ----------------------------------------------------------------------------------------------------
# workarounds from outside the package

OWN = """
import loadguard

@loadguard.workaround("{name}", applies_to=["lgtoy"], stage="after_load", reason="an engine suite's own fix",
                      upstream="my-engine#1", targets=lambda model: ["positions.table"])
def own_fix(model):
    import torch
    table = model.positions.table
    position = torch.arange(table.shape[0], dtype=torch.float32)[:, None]
    omega = 1.0 / (10000.0 ** (torch.arange(0, table.shape[1], 2, dtype=torch.float32) / table.shape[1]))
    table.copy_(torch.cat([torch.sin(position * omega), torch.cos(position * omega)], dim=-1))
    return 1
"""


def test_workarounds_from_a_file_are_registered_with_their_source(tmp_path, zoo_folder):
    file = tmp_path / "my_workarounds.py"
    file.write_text(OWN.format(name="test-own-table"))
    try:
        assert registry.load_file(file) == ["test-own-table"]
        assert registry.get("test-own-table").source == f"file {file.resolve()}"
        assert registry.load_file(file) == ["test-own-table"]  # idempotent
        model = loadguard.load(
            "AutoModelForCausalLM",
            zoo_folder("np_buffer"),
            trust_remote_code=True,
            poison=True,
            workarounds=["test-own-table"],
        )
        if IS_V5:
            assert outcomes(model)["test-own-table"].status == "applied"
            assert "positions.table" not in {f.tensor for f in model.loadguard_report.failures}
    finally:
        registry.REGISTRY.pop("test-own-table", None)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(WorkaroundError, match="broken.py failed to import: RuntimeError: boom"):
        registry.load_file(broken)
    with pytest.raises(loadguard.LoadguardError, match="no such file"):
        registry.load_file(tmp_path / "missing.py")


def _fake_distribution(tmp_path, name: str, module_source: str) -> str:
    """A site folder with one installed distribution that declares a loadguard.workarounds entry point."""
    site = tmp_path / "site"
    (site / f"{name}-1.0.dist-info").mkdir(parents=True)
    (site / f"{name}-1.0.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (site / f"{name}-1.0.dist-info" / "entry_points.txt").write_text(
        f"[loadguard.workarounds]\nmine = {name}_workarounds\n"
    )
    (site / f"{name}_workarounds.py").write_text(module_source)
    return str(site)


def test_entry_point_workarounds_are_listed_with_their_distribution(tmp_path):
    good = _fake_distribution(tmp_path / "a", "engine_suite", OWN.format(name="engine-own-table"))
    bad = _fake_distribution(tmp_path / "b", "broken_suite", "raise ImportError('no such thing')\n")
    env = {"PYTHONPATH": f"{good}:{bad}", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    script = "from loadguard.cli import main; main(['workarounds', 'list', '--format', 'json'])"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    document = json.loads(result.stdout)
    sources = {w["name"]: w["source"] for w in document["workarounds"]}
    assert sources["engine-own-table"] == "entry point mine (engine_suite)"
    assert sources["minicpmv-pos-cache"] == "built-in"
    assert document["entry_point_errors"] == {"mine (broken_suite)": "ImportError: no such thing"}


def test_cli_workaround_option_and_list(zoo_folder, capsys, tmp_path):
    from loadguard.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as info:
            main(list(args))
        return info.value.code, capsys.readouterr()

    fixed = str(zoo_folder("minicpmv_like_fixed"))
    code, captured = run(
        "audit",
        fixed,
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--workaround",
        "minicpmv-pos-cache",
        "--format",
        "json",
    )
    document = json.loads(captured.out)
    assert code == 0 and {w["name"]: w["status"] for w in document["workarounds"]}["minicpmv-pos-cache"] == "stale"
    code, captured = run(
        "audit",
        fixed,
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--workaround",
        "minicpmv-pos-cache",
        "--strict-stale",
    )
    assert code == 2 and "stale workaround" in captured.err
    code, captured = run("workarounds", "list", "--format", "json")
    names = [w["name"] for w in json.loads(captured.out)["workarounds"]]
    assert code == 0 and names == sorted(registry.REGISTRY) and "v4-attn-mask-utils" in names
    code, captured = run(
        "workarounds",
        "list",
        str(zoo_folder("minicpmv_like")),
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--format",
        "json",
    )
    status = {w["name"]: w["status"] for w in json.loads(captured.out)["workarounds"]}
    if IS_V5:
        assert status["minicpmv-pos-cache"] == "needed: resampler.pos_embed broken"
        if "v4-attn-mask-utils" in NEEDED:
            assert status["v4-attn-mask-utils"].startswith("needed: provided transformers.modeling_attn_mask_utils")
        else:  # named by auto only where needed; the model's code uses the module this transformers has again
            assert (
                status["v4-attn-mask-utils"]
                == f"stale: transformers {TRANSFORMERS_VERSION} provides what it gives back"
            )
    assert status["minicpmv-26-runner"] == "needed"
    code, captured = run(
        "workarounds", "list", fixed, "--trust-remote-code", "--workaround", "auto", "--format", "json"
    )
    assert {w["name"]: w["status"] for w in json.loads(captured.out)["workarounds"]}[
        "minicpmv-pos-cache"
    ] == "stale: resampler.pos_embed already correct"
    own = tmp_path / "own.py"
    own.write_text(OWN.format(name="test-cli-own"))
    try:
        code, captured = run(
            "audit",
            str(zoo_folder("np_buffer")),
            "--trust-remote-code",
            "--workarounds-from",
            str(own),
            "--workaround",
            "test-cli-own",
            "--format",
            "json",
        )
        document = json.loads(captured.out)
        if IS_V5:
            assert code == 1 and document["after_workarounds"] is not None
            assert "positions.table" not in {f["tensor"] for f in document["after_workarounds"]["findings"]}
        code, captured = run("workarounds", "list", "--workarounds-from", str(own), "--format", "json")
        assert {w["name"]: w["source"] for w in json.loads(captured.out)["workarounds"]}[
            "test-cli-own"
        ] == f"file {own.resolve()}"
    finally:
        registry.REGISTRY.pop("test-cli-own", None)


def test_leaked_typing_names_are_found_behind_any_star_import_and_other_files_are_not_parsed():
    """Every remote-code load asks, for every file, which typing names it leaks through ``from torch.nn.functional
    import *``: a file without that import is answered by a textual test (not parsed: a file that does not even parse
    says none), one with it, however it is wrapped, is parsed and answered."""
    from loadguard.workarounds.remote_code import _leaked_names

    assert _leaked_names("x = a * b\ndef broken(:\n") == set()  # no star import: not parsed, so no SyntaxError
    assert _leaked_names("import torch.nn.functional as F\ndef f(x: List[int]): return x\n") == set()
    wrapped = "from torch.nn.functional \\\n    import *\ndef f(x: List[int]) -> Optional[int]:\n    return None\n"
    assert _leaked_names(wrapped) == {"List", "Optional"}
    assert _leaked_names("from  torch.nn.functional  import  *  # noqa\nx: Dict = {}\n") == {"Dict"}


def test_a_failure_that_says_nothing_is_matched_by_the_line_that_raised_it(tmp_path):
    """A bare `assert` on a 4.x config default (no message to match a signature): the workaround whose `touches` the
    failing line of the model's code matches is the one `auto` tries; a line about something else matches none."""
    import linecache

    from loadguard.workarounds import _registry, get

    def raised(line: str) -> BaseException:
        filename = str(tmp_path / "transformers_modules" / "m" / "modeling_m.py")
        source = f"def build(config):\n    {line}\n"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict = {}
        exec(compile(source, filename, "exec"), namespace)
        config = type("C", (), {"max_length": None, "hidden": 2})()
        try:
            namespace["build"](config)
        except BaseException as error:
            return error
        raise AssertionError("it did not raise")

    generation = get("v4-config-generation-defaults")
    assert generation.fixes_error(raised("assert config.max_length is not None"))
    assert not generation.fixes_error(raised("assert config.hidden == 3"))
    assert "v4-config-generation-defaults" in [w.name for w in _registry.matching(raised("assert config.max_length"))]
    message = raised("assert config.max_length, 'max_length must be set'")
    assert not generation.fixes_error(message)  # a failure that says something is matched by what it says
