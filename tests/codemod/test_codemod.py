"""The source edits of ``loadguard fix``, on code as text: what a recorded line becomes, what is refused and why, and
that everything not edited stays byte for byte (comments and formatting included)."""

from __future__ import annotations

import json
import textwrap

import pytest

from loadguard._codemod import read as _codemod
from loadguard._codemod import write as _codemod_write
from loadguard.workarounds import _source_fixes, all_workarounds

SOURCE = textwrap.dedent('''\
    """A model file."""
    import math

    import torch
    from torch import nn
    from torch.nn.init import trunc_normal_


    def table(n, dim, device=None):  # a helper of the file
        return torch.arange(n * dim, dtype=torch.float32, device=device).reshape(n, dim)


    class Rotary(nn.Module):
        def __init__(self, config, base=10000.0):
            super().__init__()
            self.dim = config.head_dim
            exponent = torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim
            self.register_buffer("inv_freq", 1.0 / (base ** exponent), persistent=False)
            if config.with_table:
                self.register_buffer("table", table(4, self.dim), persistent=False)
            for i in range(2):
                self.register_buffer(f"loop{i}", torch.zeros(2), persistent=False)


    class Pos(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.size = size
            self._set_cache(self.size)
            self.register_buffer("noise", torch.randn(size), persistent=False)

        def _set_cache(self, size, device="cpu"):
            self.register_buffer("cache", torch.ones(size, device=device), persistent=False)


    class MyPreTrained(nn.Module):
        def _init_weights(self, module):
            """Docstring stays first."""
            std = 0.02  # keep this comment
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(mean=0.0,   std=std)
                nn.init.zeros_(module.bias)
            trunc_normal_(module.weight, std=std)
    ''')


def _line(text: str) -> int:
    return next(i + 1 for i, line in enumerate(SOURCE.splitlines()) if text in line)


def test_a_buffer_made_in_init_is_recomputed_from_its_own_expression():
    branch = _codemod.recompute(SOURCE, _line('"inv_freq"'), "inv_freq", "buffer", on_meta=False)
    assert branch.cls == "Rotary"
    assert branch.statements == (
        "exponent = torch.arange(0, module.dim, 2, dtype=torch.float32) / module.dim",
        "module.inv_freq.copy_(1.0 / (module.base ** exponent))",
    )
    assert branch.keep == ("base",)  # a constructor argument the module did not keep
    assert branch.globals == {"torch"}


def test_a_buffer_made_under_an_if_runs_only_where_the_instance_has_it():
    branch = _codemod.recompute(SOURCE, _line('"table"'), "table", "buffer", on_meta=True)
    assert branch.statements == (
        "if getattr(module, 'table', None) is not None:\n"
        "    if module.table.is_meta:\n        module.table = table(4, module.dim)\n    else:\n        module.table.copy_(table(4, module.dim))",
    )
    assert branch.globals == {"table"}


def test_a_buffer_made_by_a_helper_is_made_again_by_calling_it_on_the_loaded_device():
    branch = _codemod.recompute(SOURCE, _line('"cache"'), "cache", "buffer", on_meta=False)
    assert (branch.cls, branch.statements) == ("Pos", ("module._set_cache(module.size, device=module.cache.device)",))
    on_meta = _codemod.recompute(SOURCE, _line('"cache"'), "cache", "buffer", on_meta=True)
    assert on_meta.statements == (
        "module._set_cache(module.size)",
    )  # the device of a meta tensor is no place to put it


@pytest.mark.parametrize(
    ("needle", "attribute", "reason"),
    [
        ('f"loop{i}"', "loop0", "loop"),
        ("self.dim = config.head_dim", "inv_freq", "neither registers nor assigns"),
        ("std = 0.02", "std", "MyPreTrained has no __init__"),
        ('"noise"', "noise", "drawn from random numbers"),
        ("import math", "math", "not in a method"),
    ],
)
def test_what_cannot_be_recomputed_mechanically_is_refused_with_the_reason(needle, attribute, reason):
    with pytest.raises(_codemod.Refused, match=reason):
        _codemod.recompute(SOURCE, _line(needle), attribute, "buffer", on_meta=False)


def test_branches_go_first_in_init_weights_and_nothing_else_changes():
    branch = _codemod.recompute(SOURCE, _line('"inv_freq"'), "inv_freq", "buffer", on_meta=False)
    patched = _codemod_write.add_branches(SOURCE, "MyPreTrained", [branch])
    patched = _codemod_write.keep_arguments(patched, "Rotary", list(branch.keep))
    compile(patched, "patched.py", "exec")
    added = [line for line in patched.splitlines() if line not in SOURCE.splitlines()]
    assert added == [
        "        self.base = base",
        "        if isinstance(module, Rotary):",
        "            with torch.no_grad():",
        "                exponent = torch.arange(0, module.dim, 2, dtype=torch.float32) / module.dim",
        "                module.inv_freq.copy_(1.0 / (module.base ** exponent))",
    ]
    kept = [line for line in patched.splitlines() if line not in added]
    assert kept == SOURCE.splitlines()  # every original line, in order: comments, odd spacing and the docstring too
    docstring = patched.splitlines().index('        """Docstring stays first."""')
    assert patched.splitlines()[docstring + 1] == "        if isinstance(module, Rotary):"


def test_a_class_without_init_weights_gets_one_that_calls_its_parent():
    branch = _codemod.recompute(SOURCE, _line('"cache"'), "cache", "buffer", on_meta=True)
    patched = _codemod_write.add_branches(SOURCE, "Rotary", [branch])
    assert (
        "    def _init_weights(self, module):\n        super()._init_weights(module)\n        if isinstance(module, Pos):"
        in patched
    )
    compile(patched, "patched.py", "exec")


def test_an_init_weights_set_by_assignment_is_never_shadowed_by_an_added_method():
    """Issue 45, class 4: ``_init_weights = lambda ...`` in the class body: a ``def`` added after it would replace it
    (the model's own initialization silently dropped, both proofs passing): refused, saying so."""
    branch = _codemod.recompute(SOURCE, _line('"cache"'), "cache", "buffer", on_meta=True)
    source = SOURCE.replace(
        "class Rotary(nn.Module):", "class Rotary(nn.Module):\n    _init_weights = lambda self, m: None"
    )
    assert "_init_weights = lambda" in source
    with pytest.raises(_codemod.Refused, match="assigns _init_weights"):
        _codemod_write.add_branches(source, "Rotary", [branch])


def test_overwriting_writes_are_guarded_by_the_loaded_flag_and_guarded_init_calls_left_alone():
    patched, guarded = _codemod_write.guard_writes(SOURCE, "MyPreTrained")
    assert (
        guarded == 2
    )  # .data.normal_ and trunc_normal_ imported by name; nn.init.zeros_ is guarded by transformers 5
    assert (
        "            if not getattr(module.weight, '_is_hf_initialized', False):\n                module.weight.data.normal_(mean=0.0,   std=std)"
        in patched
    )
    assert (
        "        if not getattr(module.weight, '_is_hf_initialized', False):\n            trunc_normal_(module.weight, std=std)"
        in patched
    )
    assert "\n            nn.init.zeros_(module.bias)\n" in patched
    compile(patched, "patched.py", "exec")


def test_imports_are_added_once_after_the_last_import():
    patched = _codemod_write.ensure_imports(
        SOURCE, ["import torch", "from .other import Thing", "from .other import Thing"]
    )
    lines = patched.splitlines()
    assert lines.count("from .other import Thing") == 1 and lines.count("import torch") == 1
    assert lines.index("from .other import Thing") == lines.index("from torch.nn.init import trunc_normal_") + 1


def test_every_built_in_workaround_declares_its_source_fix_or_why_it_has_none():
    undeclared = [
        w.name
        for w in all_workarounds()
        if not (callable(w.source_fix) or (isinstance(w.source_fix, str) and w.source_fix.strip()))
    ]
    assert undeclared == []


V4 = textwrap.dedent("""\
    from torch.nn.functional import *
    from transformers.utils import is_torch_fx_available, logging
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaFlashAttention2


    def lengths(xs: List[int]) -> Optional[int]:
        return None


    class Gen:
        def validate(self):
            return None

        def tie_weights(self):
            return None


    def size(self):
        self.config.max_length = 3
        return self.config.max_length + config.pad_token_id
    """)


def test_workaround_source_fixes_edit_what_the_workaround_stood_in_for():
    sources = {
        "modeling_x.py": V4,
        "config.json": json.dumps({"auto_map": {"AutoModelForVision2Seq": "modeling_x.X", "AutoConfig": "c.C"}}),
    }
    typing = next(w for w in all_workarounds() if w.name == "remote-code-typing-aliases").source_fix(
        sources, {}, None
    )[0]
    assert "from typing import List, Optional" in typing["modeling_x.py"]
    fx = _source_fixes.fallback_import(
        sources, "is_torch_fx_available", ("transformers.utils",), "def is_torch_fx_available():\n    return True"
    )[0]["modeling_x.py"]
    assert "from transformers.utils import logging\n" in fx
    assert (
        "try:\n    from transformers.utils import is_torch_fx_available\nexcept ImportError:  # removed in transformers 5\n    def is_torch_fx_available():\n        return True\n"
        in fx
    )
    llama = _source_fixes.llama_attention_imports(sources)[0]["modeling_x.py"]
    assert "import LlamaAttention, LlamaAttention as LlamaFlashAttention2" in llama
    validate = _source_fixes.accepting(sources, "validate", "")[0]["modeling_x.py"]
    assert "def validate(self, **kwargs):" in validate and "def tie_weights(self):" in validate
    reads = _source_fixes.read_with_defaults(sources, {"max_length": 20, "pad_token_id": None})[0]["modeling_x.py"]
    assert "self.config.max_length = 3" in reads  # an assignment stays
    # in the file's own quotes (it has no string of its own: double, as black and ruff write them)
    assert 'return getattr(self.config, "max_length", 20) + getattr(config, "pad_token_id", None)' in reads
    auto = json.loads(
        _source_fixes.renamed_auto_map(sources, {"AutoModelForVision2Seq": "AutoModelForImageTextToText"})[0][
            "config.json"
        ]
    )
    assert list(auto["auto_map"]) == ["AutoModelForImageTextToText", "AutoConfig"]
    for text in (typing["modeling_x.py"], fx, llama, validate, reads):
        compile(text, "x.py", "exec")


def test_a_helper_a_subclass_overrides_is_called_as_the_base_init_calls_it():
    """DeepSeek-style YaRN rotary: the subclass overrides the cache helper, the base __init__ calls it."""
    source = textwrap.dedent("""\
        import torch
        from torch import nn


        class Rotary(nn.Module):
            def __init__(self, dim, max_positions=16, device=None):
                super().__init__()
                self.dim = dim
                self.max_positions = max_positions
                self._set_cache(seq_len=max_positions, device=device)

            def _set_cache(self, seq_len, device):
                self.register_buffer("cache", torch.ones(seq_len, device=device), persistent=False)


        class Yarn(Rotary):
            def __init__(self, dim, factor=2.0):
                self.factor = factor
                super().__init__(dim)

            def _set_cache(self, seq_len, device):
                self.register_buffer("cache", torch.ones(seq_len, device=device) * self.factor, persistent=False)
        """)
    line = next(i + 1 for i, text in enumerate(source.splitlines()) if "* self.factor" in text)
    branch = _codemod.recompute(source, line, "cache", "buffer", on_meta=False)
    # the helper registers a new tensor: made where the loaded one is (a model on a GPU keeps it there)
    assert (branch.cls, branch.statements) == (
        "Yarn",
        ("module._set_cache(seq_len=module.max_positions, device=module.cache.device)",),
    )


CONFIGURATION = textwrap.dedent("""\
    from transformers import PretrainedConfig


    class XConfig(PretrainedConfig):
        def __init__(self, forced_bos_token_id=None, **kwargs):
            super().__init__(**kwargs)
            self.max_length = 4
            self.max_length += 1
            if self.forced_bos_token_id is None:  # a 4.x generation default read in the configuration file
                self.bos = self.forced_bos_token_id


    class Helper:
        def f(self):
            return self.forced_bos_token_id
    """)


def test_generation_defaults_read_in_a_configuration_file_are_read_with_4x_defaults():
    reads = _source_fixes.read_with_defaults(
        {"configuration_x.py": CONFIGURATION}, {"forced_bos_token_id": None, "max_length": 20}
    )[0]["configuration_x.py"]
    assert 'if getattr(self, "forced_bos_token_id", None) is None:' in reads
    assert 'self.bos = getattr(self, "forced_bos_token_id", None)' in reads
    assert "self.max_length = 4\n" in reads and "self.max_length += 1\n" in reads  # assignments stay
    assert "return self.forced_bos_token_id" in reads  # not a config class: its own attribute
    compile(reads, "configuration_x.py", "exec")


def test_removed_names_become_try_imports_with_4x_meaning():
    from loadguard.workarounds.v4_names import fallback, module_names_source_fix

    source = textwrap.dedent("""\
        import torch
        from transformers.models.bloom.modeling_bloom import BloomConfig, _expand_mask
        from transformers.pytorch_utils import find_pruneable_heads_and_indices


        def f(mask):
            return _expand_mask(mask, 3)
        """)
    changed, description = module_names_source_fix({"modeling_x.py": source}, {}, None)
    text = changed["modeling_x.py"]
    assert "from transformers.models.bloom.modeling_bloom import BloomConfig\n" in text
    assert "try:\n    from transformers.models.bloom.modeling_bloom import _expand_mask\nexcept ImportError:" in text
    assert "def _expand_mask(mask, tgt_length):" in text  # bloom's own 4.x signature, not Llama's
    assert "def find_pruneable_heads_and_indices(" in text and "    \n" not in text
    assert description.startswith("imports _expand_mask, find_pruneable_heads_and_indices where transformers has them")
    namespace: dict = {}
    exec(
        compile(text.replace("from transformers.models.bloom.modeling_bloom import BloomConfig\n", ""), "x", "exec"),
        namespace,
    )
    import torch

    assert namespace["f"](torch.tensor([[1, 0]])).tolist() == [[[[False, True], [False, True], [False, True]]]]
    assert fallback("transformers.utils", "is_flash_attn_available", None).startswith("def is_flash_attn_available(")
    assert fallback("transformers.models.x.modeling_x", "SomethingNew", None) is None


def test_rope_default_and_attention_probe_source_fixes():
    from loadguard.workarounds.v4_behaviour import attention_probe_source_fix, rope_default_source_fix

    rope = textwrap.dedent("""\
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


        def inv_freq(config):
            return ROPE_INIT_FUNCTIONS["default"](config, None)[0]
        """)
    text = rope_default_source_fix({"modeling_x.py": rope}, {}, None)[0]["modeling_x.py"]
    namespace: dict = {}
    exec(compile(text, "x", "exec"), namespace)
    config = type("C", (), {"rope_theta": 10000.0, "hidden_size": 8, "num_attention_heads": 2, "head_dim": 4})()
    assert namespace["inv_freq"](config).tolist() == pytest.approx([1.0, 0.01])
    assert rope_default_source_fix({"modeling_y.py": "import torch\n"}, {}, None)[0] == {}
    probe = textwrap.dedent("""\
        class Wrapper:
            @property
            def _supports_sdpa(self):
                return self.language_model._supports_sdpa
        """)
    text = attention_probe_source_fix({"modeling_x.py": probe}, {}, None)[0]["modeling_x.py"]
    namespace = {}
    exec(compile(text, "x", "exec"), namespace)
    wrapper = namespace["Wrapper"]()
    assert wrapper._supports_sdpa is True  # before the submodule exists: the class's answer
    wrapper.language_model = type("L", (), {"_supports_sdpa": False})()
    assert wrapper._supports_sdpa is False  # then the submodule's


def test_a_recompute_reading_the_default_dtype_runs_under_the_loaded_dtype():
    source = textwrap.dedent("""\
        import torch
        from torch import nn


        class Rope(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n
                self.register_buffer("a", torch.arange(n, dtype=torch.float32), persistent=False)
                self.register_buffer("b", torch.linspace(0, 1, n), persistent=False)
                self.register_buffer("c", torch.arange(n, dtype=torch.get_default_dtype()), persistent=False)
        """)
    plain = _codemod.recompute(source, 9, "a", "buffer", on_meta=False)
    dtyped = _codemod.recompute(source, 10, "b", "buffer", on_meta=False)
    assert (plain.default_dtype, dtyped.default_dtype) == (False, True)
    # the default dtype read by name: the loaded tensor's own dtype stands for it, no global state in _init_weights
    named = _codemod.recompute(source, 11, "c", "buffer", on_meta=False)
    assert named.default_dtype is False and "torch.arange(module.n, dtype=module.c.dtype)" in named.statements[-1]
    assert "set_default_dtype" not in _codemod_write._branch_text(named, "module")
    assert "set_default_dtype" not in _codemod_write._branch_text(plain, "module")
    text = _codemod_write._branch_text(dtyped, "module")
    assert "torch.set_default_dtype(self.dtype)" in text and "finally:\n        torch.set_default_dtype(saved" in text
    assert _codemod_write.merge([plain, dtyped])[0].default_dtype is True


def test_a_local_assigned_under_an_if_of_the_config_is_recomputed_by_replaying_the_if():
    """`self.cache_qmax` from a local that `__init__` assigns under `if config...`: the whole `if` is replayed from the
    config; an `if` that does more than assign locals is still refused."""
    source = textwrap.dedent("""\
        import torch
        from torch import nn


        class Cache(nn.Module):
            def __init__(self, config, bits=8):
                super().__init__()
                self.config = config
                qmax = 127
                if config.quantize:
                    qmax = 2 ** (bits - 1) - 1
                elif config.wide:
                    qmax = 2**15 - 1
                else:
                    scale = 2.0
                    qmax = int(scale * 100)
                self.register_buffer("cache_qmax", torch.tensor(qmax), persistent=False)
                if config.extra:
                    self.extra = nn.Linear(2, 2)
                    limit = 3
                self.register_buffer("limit", torch.tensor(limit if config.extra else 0), persistent=False)
        """)
    line = next(i + 1 for i, text in enumerate(source.splitlines()) if '"cache_qmax"' in text)
    branch = _codemod.recompute(source, line, "cache_qmax", "buffer", on_meta=False, available=frozenset({"config"}))
    text = "\n".join(branch.statements)
    assert "if module.config.quantize:\n    qmax = 2 ** (module.bits - 1) - 1" in text and branch.keep == ("bits",)
    assert text.index("qmax = 127") < text.index("if module.config.quantize") < text.index("module.cache_qmax.copy_(")
    import torch

    for quantize, wide, expected in ((True, False, 127), (False, True, 32767), (False, False, 200)):
        module = type("M", (), {})()
        module.config = type("C", (), {"quantize": quantize, "wide": wide})()
        module.bits, module.cache_qmax = 8, torch.tensor(0)
        exec(compile(text, "branch", "exec"), {"torch": torch, "module": module})
        assert module.cache_qmax.item() == expected
    line = next(i + 1 for i, text in enumerate(source.splitlines()) if '"limit"' in text)
    with pytest.raises(_codemod.Refused, match="an if that does more than assign local names"):
        _codemod.recompute(source, line, "limit", "buffer", on_meta=False, available=frozenset({"config"}))


def test_a_table_a_free_function_makes_on_the_module_is_recomputed_by_calling_it_again():
    """The line that made it sits in a function of the file (not a method) that the class's __init__ calls with self:
    that call is replayed, on the loaded tensor's device."""
    source = textwrap.dedent("""\
        import torch
        from torch import nn


        def setup_rope(module, dim, base=10000.0, device=None):
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=device).float() / dim))
            module.register_buffer("inv_freq", inv_freq, persistent=False)


        class Rotary(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.dim = config.head_dim
                setup_rope(self, self.dim)
        """)
    line = next(i + 1 for i, text in enumerate(source.splitlines()) if "register_buffer" in text)
    with pytest.raises(_codemod.Refused, match="not in a method of a class"):
        _codemod.recompute(source, line, "inv_freq", "buffer", on_meta=False)
    branch = _codemod.recompute(source, line, "inv_freq", "buffer", on_meta=False, owner="Rotary")
    assert branch.cls == "Rotary" and "setup_rope" in branch.globals
    assert branch.statements == ("setup_rope(module, module.dim, device=module.inv_freq.device)",)
    with pytest.raises(_codemod.Refused, match="does not call"):
        _codemod.recompute(
            source.replace("setup_rope(self, self.dim)", "pass"),
            line,
            "inv_freq",
            "buffer",
            on_meta=False,
            owner="Rotary",
        )
