"""The survey of v4 behaviour published remote code relies on (``workarounds/data/v4_behaviour.json``), kept honest:
every file read is named once, every idiom has a recognisable pattern and an answer, and every idiom answered with a
workaround has one registered and a zoo entry that fails the published way without it."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from loadguard import workarounds as registry
from loadguard import zoo

from ..conftest import IS_V5, TRANSFORMERS_VERSION


@pytest.fixture(scope="module")
def catalogue():
    return json.loads(resources.files("loadguard.workarounds").joinpath("data/v4_behaviour.json").read_text())


def test_fifty_published_files_were_read_each_named_once(catalogue):
    files = [(s["repo"], s["path"]) for s in catalogue["surveyed"]]
    assert len(files) >= 50 and len(set(files)) == len(files)
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", repo) and path.endswith(".py") for repo, path in files)
    assert all(s["read"] in ("whole", "head", "tail", "middle") for s in catalogue["surveyed"])
    kinds = {s["kind"].split(" ")[0] for s in catalogue["surveyed"]}
    assert {"VLM", "text", "audio", "OCR", "embedding", "MoE"} <= kinds


def test_every_idiom_is_recognisable_and_answered(catalogue):
    ids = [i["id"] for i in catalogue["idioms"]]
    assert len(ids) == len(set(ids))
    for idiom in catalogue["idioms"]:
        re.compile(idiom["recognise"])
        assert idiom["verdict"] in ("workaround", "detected", "supported", "hint", "declined"), idiom
        if idiom["verdict"] == "declined":
            assert idiom["reason"], idiom
        elif idiom["verdict"] == "workaround":
            assert idiom["workaround"] in registry.REGISTRY, idiom
        else:
            assert idiom["how"], idiom
    seen = {i for s in catalogue["surveyed"] for i in s["idioms"]}
    assert seen <= set(ids), seen - set(ids)  # a file names only idioms the catalogue explains


def test_each_covered_idiom_has_a_zoo_entry_that_fails_the_published_way_without_its_workaround(catalogue):
    for idiom in catalogue["idioms"]:
        if idiom["verdict"] != "workaround":
            continue
        entry = zoo.get(idiom["zoo"])
        assert idiom["workaround"] in entry.workarounds, idiom
        # the workaround declares the failure the entry reproduces: auto picks it, the hint names it
        error_type, _, message = dict(entry.failures)[idiom["workaround"]].partition(": ")
        workaround = registry.get(idiom["workaround"])
        assert any(sig.matches(type(error_type, (Exception,), {})(message)) for sig in workaround.fixes), idiom
    for idiom in catalogue["idioms"]:
        if idiom.get("zoo"):
            zoo.get(idiom["zoo"])  # detected idioms name zoo entries that exist


@pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} has the v4 behaviour these idioms rely on")
def test_the_recognisers_find_the_idioms_in_the_zoo_code_that_reproduces_them(catalogue):
    templates = resources.files("loadguard.zoo.templates.lgtoy")
    for idiom in catalogue["idioms"]:
        if idiom["verdict"] != "workaround":
            continue
        family = zoo.get(idiom["zoo"]).family
        source = "".join(
            templates.joinpath(name).read_text()
            for name in (f"modeling_{family}.py", f"configuration_{family}.py", "modeling_lgtoy.py")
        )
        assert re.search(idiom["recognise"], source), idiom["id"]
