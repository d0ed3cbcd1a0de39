"""Output says each thing once (issue 56): a proof that did not run is "not run: why", never "not run: not run: why";
the classes whose v4 tie list maps to the same weight are one sentence, not one per class."""

from __future__ import annotations

import torch

from loadguard._fix.proofs import Proof
from loadguard.workarounds.remote_code import tied_weights_source


def test_a_proof_not_run_says_why_once():
    proof = Proof("same_outputs", "5.25.0", None, "not run: proof (b) took no outputs of the original")
    assert proof.said == "proof (b) took no outputs of the original"
    assert Proof("loads_right", "5.25.0", True, "not run: a detail that says so").said.startswith("not run: ")


class _Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(4, 2)

    def get_input_embeddings(self):
        return self.embed_tokens


class LgA(_Base):
    pass


class LgB(_Base):
    pass


def test_classes_tying_to_the_same_weight_are_one_sentence():
    source = (
        "class LgA(Base):\n    _tied_weights_keys = ['lm_head.weight']\n\n"
        "class LgB(Base):\n    _tied_weights_keys = ['lm_head.weight']\n"
    )
    model = torch.nn.ModuleDict({"a": LgA(), "b": LgB()})
    changed, said = tied_weights_source({"modeling_x.py": source}, {}, model)
    assert "_tied_weights_keys = {'lm_head.weight': 'embed_tokens.weight'}" in changed["modeling_x.py"]
    assert said["modeling_x.py"].count("maps to embed_tokens.weight") == 1
    assert said["modeling_x.py"].startswith("LgA, LgB: _tied_weights_keys maps to embed_tokens.weight")
