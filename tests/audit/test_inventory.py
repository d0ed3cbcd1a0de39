from __future__ import annotations

import torch
from torch import nn

from loadguard._audit.inventory import Inventory


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        table = torch.arange(6.0)
        self.a = nn.Module()
        self.b = nn.Module()
        self.a.register_buffer("table", table, persistent=False)
        self.b.register_buffer("table", table, persistent=False)
        self.register_buffer("stats", torch.ones(2))
        self.head = nn.Linear(2, 2)
        self.tail = nn.Linear(2, 2)
        self.tail.weight = self.head.weight  # tied


def test_every_alias_is_listed_with_its_first_name():
    inv = Inventory(Shared())
    assert inv["a.table"].alias_of is None
    assert inv["b.table"].alias_of == "a.table"
    assert inv["tail.weight"].alias_of == "head.weight"
    assert inv.aliases("b.table") == ["a.table", "b.table"]
    assert inv.tensor("b.table") is inv.tensor("a.table")


def test_kinds_and_persistence():
    inv = Inventory(Shared())
    assert [e.name for e in inv.non_persistent_buffers] == ["a.table", "b.table"]
    assert inv["stats"].persistent and inv["stats"].kind == "buffer"
    assert inv["head.weight"].kind == "parameter"
    assert {e.name for e in inv.state_entries} == set(Shared().state_dict())


def test_separate_tensors_are_not_aliases():
    model = Shared()
    model.b.table = torch.arange(6.0)  # same values, another tensor
    inv = Inventory(model)
    assert inv["b.table"].alias_of is None


def test_meta_tensors_alias_by_object():
    model = Shared()
    meta = torch.empty(6, device="meta")
    model.a.table = meta
    model.b.table = meta
    inv = Inventory(model)
    assert inv["b.table"].alias_of == "a.table" and inv["b.table"].on_meta
