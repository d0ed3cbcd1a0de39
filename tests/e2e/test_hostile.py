"""Hostile configs and module trees (issue 16): whatever a config or a model's code holds, loadguard ends in a correct
audit or one typed error with a hint, never an "unexpected" crash.

Hypothesis draws configs (torch dtypes, sets, tuples, non-string keys, NaN, sub-configs as dicts or objects, a
``to_dict`` overridden the v4 way or one that raises, no ``model_type``, a ``config_class`` that disagrees) and module
trees (non-persistent float/int/bool buffers rebuilt or not by ``_init_weights``, buffers that are views of
parameters, tensor-subclass buffers, modules whose ``__getattr__`` raises something other than AttributeError). Each
model is audited as constructed (it must be clean), then loaded through transformers' own ``from_pretrained`` under
poison and audited (on transformers 5 exactly the buffers its ``_init_weights`` does not rebuild must fail), then
scanned from its config (the same prediction).
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch import nn
from transformers import LlamaConfig, PretrainedConfig, PreTrainedModel

import loadguard
from loadguard.errors import LoadguardError

from ..conftest import IS_V5


class Opaque:
    """A config value with no JSON form (an object a v4-era config keeps, e.g. a processor setting)."""

    def __init__(self, value):
        self.value = value


class Tagged(torch.Tensor):
    """A tensor subclass, as some models keep for buffers (a marker type; values as a plain tensor)."""


class HostileConfig(PretrainedConfig):
    model_type = "lg_hostile"

    def __init__(self, hidden=4, extras=None, to_dict_style="plain", **kwargs):
        self.hidden = hidden
        self.to_dict_style = to_dict_style
        for name, value in (extras or {}).items():
            setattr(self, name, value)
        super().__init__(**kwargs)

    def to_dict(self):
        if self.to_dict_style == "v4_deepcopy":  # what v4-era VLM configs do: dtype stays a torch.dtype
            return copy.deepcopy(self.__dict__)
        if self.to_dict_style == "raises":
            raise RuntimeError("this config cannot be turned into a dict")
        return super().to_dict()


class NoModelTypeConfig(HostileConfig):
    model_type = ""

    def __init__(self, hidden=4, extras=None, to_dict_style="plain", **kwargs):
        super().__init__(hidden=hidden, extras=extras, to_dict_style=to_dict_style, **kwargs)


def sincos(n: int, dim: int) -> torch.Tensor:
    position = torch.arange(n, dtype=torch.float32)[:, None]
    omega = 1.0 / (100.0 ** (torch.arange(dim, dtype=torch.float32) / dim))
    return torch.sin(position * omega + 0.5)


def make_buffer(kind: str, n: int) -> torch.Tensor:
    """A value no poison fill (NaN, INT_MAX, all True) can pass for."""
    if kind == "float":
        return sincos(n, 3)
    if kind == "int":
        return torch.arange(n, dtype=torch.int64) * 3 + 1
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return mask


class RaisingGetattr(nn.Module):
    """``__getattr__`` that raises something other than AttributeError for names it does not have (transformers'
    own flag aside, which its loading reads off every module)."""

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_is_hf"):
                raise
            raise KeyError(f"no such thing: {name}") from None


class Leaf(nn.Module):
    def __init__(self, spec: dict, hidden: int):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)
        for index, (kind, persistent, rebuilt) in enumerate(spec["buffers"]):
            self.register_buffer(f"b{index}", make_buffer(kind, spec["size"]), persistent=persistent)
        if spec["view_of_parameter"]:  # a buffer that is a view of a parameter: derived, not computed
            self.register_buffer("view", self.proj.weight[0], persistent=False)
        if spec["subclass"]:
            self.register_buffer("tagged", make_buffer("float", spec["size"]).as_subclass(Tagged), persistent=False)
        self.spec = spec


class HostileModelBase(PreTrainedModel):
    config_class = HostileConfig
    tree: tuple = ()

    def __init__(self, config):
        super().__init__(config)
        self.children_ = nn.ModuleList()
        for spec in self.tree:
            holder = RaisingGetattr() if spec["raising_getattr"] else nn.Module()
            holder.leaf = Leaf(spec, config.hidden)
            self.children_.append(holder)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        if isinstance(module, Leaf):
            with torch.no_grad():
                for index, (kind, persistent, rebuilt) in enumerate(module.spec["buffers"]):
                    if rebuilt and not persistent:  # a persistent buffer comes from the checkpoint
                        getattr(module, f"b{index}").copy_(make_buffer(kind, module.spec["size"]))


buffers = st.tuples(st.sampled_from(["float", "int", "bool"]), st.booleans(), st.booleans())
leaves = st.fixed_dictionaries(
    {
        "buffers": st.lists(buffers, max_size=3),
        "size": st.integers(2, 5),
        "view_of_parameter": st.booleans(),
        "subclass": st.booleans(),
        "raising_getattr": st.sampled_from([False, False, False, True]),  # 4.57 cannot construct such a model at all
    }
)
hashable = st.one_of(st.integers(-5, 5), st.text(max_size=4), st.tuples(st.integers(0, 3)))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.device("cpu")]),
    st.builds(Opaque, st.integers()),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.frozensets(hashable, max_size=3),
        st.sets(hashable, max_size=3),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(), st.tuples(st.integers(0, 2))), inner, max_size=3
        ),
        st.builds(LlamaConfig, hidden_size=st.just(8), num_attention_heads=st.just(2), num_hidden_layers=st.just(1)),
    ),
    max_leaves=6,
)
extras = st.dictionaries(st.from_regex(r"x_[a-z]{1,6}", fullmatch=True), values, max_size=4)
configs = st.fixed_dictionaries(
    {
        "extras": extras,
        "to_dict_style": st.sampled_from(["plain", "v4_deepcopy", "raises"]),
        "no_model_type": st.booleans(),
        "class_disagrees": st.booleans(),
        "dtype_attribute": st.sampled_from([None, torch.float32, "float32"]),
    }
)


def build(tree: list[dict], settings_: dict):
    config_class = NoModelTypeConfig if settings_["no_model_type"] else HostileConfig
    config = config_class(extras=settings_["extras"], to_dict_style=settings_["to_dict_style"])
    if settings_["dtype_attribute"] is not None:
        config.dtype = settings_["dtype_attribute"]
    attributes = {"tree": tuple(tree)}
    if settings_["class_disagrees"]:
        attributes["config_class"] = LlamaConfig  # a config_class that is not the config's class
    cls = type("HostileModel", (HostileModelBase,), attributes)
    return cls, config


def expected_failures(tree: list[dict]) -> set[str]:
    """What a load leaves wrong on this model: a buffer that is a view of a parameter on any meta-device load (4.57
    leaves it on meta, 5.x gives it fresh memory); on transformers 5, every non-persistent buffer its _init_weights
    does not rebuild (the tensor-subclass buffers included)."""
    out = set()
    for index, spec in enumerate(tree):
        prefix = f"children_.{index}.leaf"
        if spec["view_of_parameter"]:
            out.add(f"{prefix}.view")
        if not IS_V5:
            continue
        for number, (kind, persistent, rebuilt) in enumerate(spec["buffers"]):
            if not persistent and not rebuilt:
                out.add(f"{prefix}.b{number}")
        if spec["subclass"]:
            out.add(f"{prefix}.tagged")
    return out


def audited(run):
    """``run()``'s report, or None when it ended in a typed loadguard error with a hint."""
    try:
        report = run()
    except LoadguardError as error:
        assert error.message and (error.hint or error.fixes), error
        return None
    json.loads(report.to_json())  # whatever the config held, the report is JSON
    return report


@settings(
    max_examples=int(__import__("os").environ.get("LOADGUARD_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree=st.lists(leaves, min_size=1, max_size=3), settings_=configs)
def test_any_config_and_module_tree_ends_in_a_correct_audit_or_one_typed_error(tree, settings_):
    cls, config = build(tree, settings_)
    torch.manual_seed(0)
    try:
        model = cls(config)  # constructed in real memory: exactly what its code computes
    except Exception as error:  # transformers' own construction refused it (4.57 probes modules with hasattr)
        event(f"transformers could not construct it: {type(error).__name__}")
        return

    report = audited(lambda: loadguard.audit(model, checkpoint=False))
    assert report is not None, "a model as constructed must be auditable"
    assert report.ok, [(f.tensor, f.status, f.detail) for f in report.failures]
    assert report.summary("non_persistent_buffer").ran

    state = {k: v.clone() for k, v in model.state_dict().items()}
    with loadguard.poison():
        try:
            loaded = cls.from_pretrained(
                None, config=config, state_dict=state, use_kernels=False
            )  # 5.25 kernelize trips on such modules
        except Exception as error:  # transformers itself refused this config: not loadguard's to judge
            loaded = None
            note = f"{type(error).__name__}: {error}"
    if loaded is None:
        event(f"transformers refused the config: {note.split(':')[0]}")
        assert "loadguard" not in note
        return
    report = audited(lambda: loadguard.audit(loaded, checkpoint=False))
    assert report is not None
    failing = {f.tensor for f in report.failures}
    assert failing == expected_failures(tree)
    if failing:
        result = loadguard.repair(loaded, report)
        repairable = {name for name in failing if not name.endswith(".view")}  # a view's value is the parameter's
        assert set(result.repaired) >= repairable - {u.tensor for u in result.unrepaired}
        json.loads(result.to_json())

    predicted = audited(lambda: loadguard.scan(config, model_class=cls))
    event("scanned" if predicted is not None else "scan: a typed error")
    if predicted is not None:
        assert {f.tensor for f in predicted.failures} == failing


def test_v4_style_to_dict_returning_a_dtype_audits_and_scans():
    """The published case: a config whose to_dict is a deep copy of __dict__ returns dtype as a torch.dtype, and the
    reference cache keyed on its JSON made every audit and scan crash."""
    cls, config = build(
        [
            {
                "buffers": [("float", False, False)],
                "size": 3,
                "view_of_parameter": False,
                "subclass": False,
                "raising_getattr": False,
            }
        ],
        {
            "extras": {"x_sub": {1: {math.nan, "a"}}},
            "to_dict_style": "v4_deepcopy",
            "no_model_type": False,
            "class_disagrees": False,
            "dtype_attribute": torch.float32,
        },
    )
    with pytest.raises(TypeError):
        config.to_json_string()  # what used to be the cache key
    model = cls(config)
    assert loadguard.audit(model, checkpoint=False).ok
    report = loadguard.scan(config, model_class=cls)
    assert {f.tensor for f in report.failures} == ({"children_.0.leaf.b0"} if IS_V5 else set())


def test_the_reference_cache_key_needs_no_serializable_config():
    from loadguard._audit.reference import config_fingerprint

    a = HostileConfig(extras={"x_a": {1: torch.float32, "k": {3, 4}}, "x_b": math.nan}, to_dict_style="raises")
    b = HostileConfig(extras={"x_a": {1: torch.float32, "k": {4, 3}}, "x_b": math.nan}, to_dict_style="raises")
    c = HostileConfig(extras={"x_a": {1: torch.bfloat16, "k": {3, 4}}, "x_b": math.nan}, to_dict_style="raises")
    assert config_fingerprint(a) == config_fingerprint(b) != config_fingerprint(c)
    loop: dict = {}
    loop["self"] = loop
    assert config_fingerprint(HostileConfig(extras={"x_loop": loop}))  # a cycle is walked once


V4_TO_DICT = """

    def to_dict(self):  # what published v4-era configs do: a deep copy of __dict__ (dtype stays a torch.dtype)
        import copy

        output = copy.deepcopy(self.__dict__)
        output["model_type"] = self.__class__.model_type
        return output
"""


@pytest.mark.parametrize("command", ["audit", "scan"])
def test_remote_code_config_with_a_v4_to_dict_through_the_cli(zoo_folder, tmp_path, command, capsys):
    """The published failure, end to end: remote code whose config overrides to_dict the v4 way (dtype comes back
    as a torch.dtype): audit and scan report what the load gets wrong (they crashed with 'unexpected TypeError')."""
    import shutil

    from loadguard.cli import main

    folder = tmp_path / "v4-to-dict"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    configuration = folder / "configuration_lgtoy.py"
    configuration.write_text(configuration.read_text() + V4_TO_DICT)
    config = json.loads((folder / "config.json").read_text())
    config.update(
        {"x_nan": math.nan, "x_nested": {"1": [1, 2, {"a": None}]}}
    )  # JSON Python writes: NaN is legal there
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit) as info:
        main([command, str(folder), "--trust-remote-code", "--format", "json"])
    captured = capsys.readouterr()
    assert "unexpected" not in captured.err, captured.err
    document = json.loads(captured.out)
    failing = sorted(
        f["tensor"]
        for f in document["findings"]
        if f["status"] in ("uninitialized", "on_meta", "mismatch", "overwritten")
    )
    if IS_V5:
        assert info.value.code == 1 and failing == [
            "layers.0.attn.causal_mask",
            "layers.1.attn.causal_mask",
            "positions.index",
            "positions.table",
        ]
    else:
        assert info.value.code == 0 and failing == []


@pytest.mark.parametrize(
    "case, edit",
    [
        ("no model_type", lambda config: config.pop("model_type")),
        (
            "auto_map to a missing class",
            lambda config: config["auto_map"].update(AutoModelForCausalLM="modeling_lgtoy.Nope"),
        ),
        ("architectures not a list", lambda config: config.update(architectures="LgToyForCausalLM")),
        ("auto_map not a dict", lambda config: config.update(auto_map=["modeling_lgtoy.LgToyForCausalLM"])),
    ],
)
def test_broken_config_json_is_one_error_and_a_hint(zoo_folder, tmp_path, case, edit, capsys):
    import shutil

    from loadguard.cli import main

    folder = tmp_path / "broken"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    for command in ("audit", "scan"):
        with pytest.raises(SystemExit) as info:
            main([command, str(folder), "--trust-remote-code"])
        captured = capsys.readouterr()
        assert "unexpected" not in captured.err and "Traceback" not in captured.err, (case, command, captured.err)
        lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith("Loading ")]
        if info.value.code == 2:
            assert len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("Hint: "), (
                case,
                command,
                captured.err,
            )
        else:  # transformers coped with it: then it is an ordinary audit
            assert info.value.code in (0, 1), (case, command, captured.err)
