"""Everything that touches transformers' internals: ``from_pretrained`` as a user would call it, its failures translated
(``pretrained``), what it reports about a load (``loading_info``) and says while loading (``noise``), the patches of its
machinery a scan relies on (``patches``), writes observed and replayed (``writes``, ``replay``), where each tensor came
from in code (``origins``), leftover memory made deterministic (``poisoning``), declared ties (``ties``) and accelerate's
offload (``offload``)."""

from __future__ import annotations

from .._infra import lazy_face

__getattr__, __dir__, __all__ = lazy_face(
    __name__,
    {
        "building": ("MAX_SYNTHETIC", "built_from_config", "class_for", "fill", "shrunk", "synthetic"),
        "inputs": (
            "describe_crash",
            "model_inputs",
            "model_outputs",
            "prompt_ids",
            "tokenized",
            "token_ids",
        ),
        "noise": ("explaining",),
        "offload": ("Offloaded",),
        "origins": ("named", "recording"),
        "patches": (
            "CompleteKeys",
            "WEIGHTLESS_METHOD",
            "complete_keys_from_the_model",
            "constructing_with_meta_writes_skipped",
            "init_weights_calls",
            "large_tensors_on_meta",
            "loaded_tensors",
            "meta_writes_skipped",
            "parameters_stay_on_meta",
            "recording_init_writes",
            "return_freed_memory",
            "uninitialized_tensors_on_meta",
            "weightless_load_options",
            "weightless_state_dict",
        ),
        "poisoning": ("poison",),
        "pretrained": (
            "BaseCall",
            "check_checkpoint",
            "check_device",
            "from_pretrained",
            "parse_dtype",
            "resolve_class",
            "through_the_base",
            "translate",
        ),
        "replay": ("Replay", "initialization", "ran_initialization"),
        "writes": ("InitWrites",),
    },
    modules=("loading_info", "ties"),
)
