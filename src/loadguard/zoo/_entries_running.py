"""The zoo's entries for v4 code past the load: each loads on transformers 5 and breaks when it runs (in ``forward``,
in ``generate``), as ``ZooEntry.runs_into`` records; ``loadguard fix`` writes the source fix its workaround stands for and
proof (c) shows the copy answers as the original did on 4.x."""

from __future__ import annotations

from ._entry import TOY_NP, ZooEntry

RUNS_INTO: tuple[ZooEntry, ...] = (
    ZooEntry(
        "v4_forward_api",
        "lgv4fwd",
        "(a) remote code whose forward calls self.get_head_mask (4.x models had it, 5.x removed it): it loads, and only "
        "its forward raises AttributeError on transformers 5; its buffers are not rebuilt",
        failure_mode="a",
        expected=TOY_NP,
        runs_into=(
            (
                "v4-model-attributes",
                "forward",
                "AttributeError: 'LgV4FwdForCausalLM' object has no attribute 'get_head_mask'",
            ),
        ),
    ),
    ZooEntry(
        "v4_legacy_cache",
        "lgv4cache",
        "(a) remote code that converts its cache at the boundary with DynamicCache.from_legacy_cache / "
        "to_legacy_cache (4.3x-4.5x style, removed in 5.x): it loads and runs a forward pass, and generate raises "
        "AttributeError on transformers 5; its buffers are not rebuilt",
        failure_mode="a",
        expected=TOY_NP,
        runs_into=(
            (
                "v4-legacy-cache",
                "generate",
                "AttributeError: type object 'DynamicCache' has no attribute 'from_legacy_cache'",
            ),
        ),
    ),
    ZooEntry(
        "v4_generate_hooks",
        "lgv4hooks",
        "(a) remote code written for transformers 4.41 in ChatGLM's way: its own generation hook takes its past back "
        "through GenerationMixin._extract_past_from_model_output (removed in 4.47), grows the attention mask it is "
        "handed (5.x drops an all-ones one) and its config says num_layers, "
        "not num_hidden_layers: it loads and runs a forward pass, and generate raises AttributeError on "
        "transformers 5; its buffers are not rebuilt",
        failure_mode="a",
        expected=TOY_NP,
        config_json={"transformers_version": "4.41.2", "use_cache": True},
        runs_into=(
            (
                "v4-cache-layer-count",
                "generate",
                "AttributeError: 'LgV4HooksConfig' object has no attribute 'num_hidden_layers'",
            ),
            (
                "v4-generate-hooks",
                "generate",
                "AttributeError: 'LgV4HooksForCausalLM' object has no attribute '_extract_past_from_model_output'",
            ),
            (
                "v4-generate-attention-mask",
                "generate",
                "AttributeError: 'NoneType' object has no attribute 'new_ones'",
            ),
        ),
    ),
)

__all__ = ["RUNS_INTO"]
