"""Findings delivered where they are acted on: SARIF (validated against the OASIS schema), GitHub workflow commands and
a job summary, JUnit XML; a model that could not be checked still has its row."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from loadguard._infra.text import cell
from loadguard.formats import Row
from loadguard.formats import render_rows as render
from loadguard.report import Finding

from ..conftest import IS_V5, TRANSFORMERS_VERSION, chained
from ..conftest import run_cli as _cli

needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text())


def _copy(zoo_folder, name, target: Path) -> str:
    shutil.copytree(zoo_folder(name), target)
    return str(target)


def _line(folder: str, uri: str, line: int) -> str:
    return (Path(uri) if Path(uri).is_absolute() else Path.cwd() / uri).read_text().splitlines()[line - 1]


@needs_v5
@pytest.mark.parametrize(
    ("name", "command", "code_text"),
    [
        ("np_buffer", "audit", "register_buffer("),
        ("overwritten", "audit", "normal_("),
        ("np_buffer", "scan", "register_buffer("),
        ("overwritten", "scan", "normal_("),
    ],
)
def test_sarif_validates_locates_and_fingerprints_stably(
    capsys, zoo_folder, tmp_path, monkeypatch, name, command, code_text
):
    monkeypatch.chdir(tmp_path)
    documents = []
    for copy in ("first", "second"):  # two folders, as two machines or two CI runs would have
        folder = _copy(zoo_folder, name, tmp_path / copy / name)
        code, out, err = _cli(capsys, command, folder, "--trust-remote-code", "--format", "sarif")
        assert code == 1, err
        document = json.loads(out)
        jsonschema.validate(document, SCHEMA)
        results = document["runs"][0]["results"]
        assert results
        for result in results:
            location = result["locations"][0]["physicalLocation"]
            uri, line = location["artifactLocation"]["uri"], location["region"]["startLine"]
            assert uri.startswith(f"{copy}/{name}/") and location["artifactLocation"]["uriBaseId"] == "SRCROOT"
            assert (Path.cwd() / uri).is_file()
            if name == "overwritten" or "causal_mask" not in result["message"]["text"]:
                assert code_text in _line(folder, uri, line), (uri, line)
        rules = {rule["id"] for rule in document["runs"][0]["tool"]["driver"]["rules"]}
        assert {r["ruleId"] for r in results} == rules and all(r["ruleIndex"] < len(rules) for r in results)
        documents.append(document)
    fingerprints = [
        sorted(r["partialFingerprints"]["loadguardFinding/v1"] for r in d["runs"][0]["results"]) for d in documents
    ]
    assert fingerprints[0] == fingerprints[1]


@needs_v5
def test_github_annotations_and_the_step_summary(capsys, zoo_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _copy(zoo_folder, "np_buffer", tmp_path / "model")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, out, err = _cli(capsys, "audit", folder, "--trust-remote-code", "--format", "github")
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 4 and all(line.startswith("::error file=model/modeling_lgtoy.py,line=") for line in lines)
    assert "title=loadguard%3A positions.index uninitialized::" in out
    assert (
        "| " + cell(folder) + " | 4 wrong | " in summary.read_text()
        and "`positions.index` (uninitialized) at `modeling_lgtoy.py:36`" in summary.read_text()
    )


def test_github_escapes_what_would_end_a_command():
    finding = Finding(
        "a.b",
        "buffer",
        "non_persistent_buffer",
        "uninitialized",
        "float32",
        (1,),
        "cpu",
        "50% wrong\nreally, it is: wrong",
    )
    out = render("github", [Row("m", "C", findings=(finding,))])
    assert out == "::error title=loadguard%3A a.b uninitialized::m: 50%25 wrong%0Areally, it is: wrong"


@needs_v5
def test_junit_a_case_per_check_for_one_model_and_per_model_for_a_fleet(capsys, zoo_folder, tmp_path):
    code, out, _ = _cli(capsys, "audit", str(zoo_folder("np_buffer")), "--trust-remote-code", "--format", "junit")
    root = ET.fromstring(out)
    cases = {case.get("name"): case for case in root.iter("testcase")}
    assert code == 1 and root.get("tests") == "5" and root.get("failures") == "1"
    assert (
        cases["non_persistent_buffer"].find("failure") is not None and cases["meta_leftover"].find("failure") is None
    )
    models = tmp_path / "models.txt"
    models.write_text(f"{zoo_folder('np_buffer')}\n{zoo_folder('clean')}\n{tmp_path / 'no-such-model'}\n")
    code, out, _ = _cli(capsys, "scan", "--from", str(models), "--trust-remote-code", "--format", "junit")
    root = ET.fromstring(out)
    assert code == 3
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "1")


def test_an_unloadable_model_still_has_its_row(capsys, tmp_path):
    missing = str(tmp_path / "no-such-model")
    code, out, err = _cli(capsys, "audit", missing, "--format", "json")
    document = json.loads(out)
    assert code == 2 and err.startswith("Error: ")
    assert document["ok"] is False and document["findings"] == [] and document["schema_version"] == 1
    assert document["error"]["kind"] == "ModelNotFoundError" and document["error"]["hint"]
    code, out, _ = _cli(capsys, "audit", missing, "--format", "sarif")
    sarif = json.loads(out)
    jsonschema.validate(sarif, SCHEMA)
    (notification,) = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert (
        code == 2
        and missing in notification["message"]["text"]
        and sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
    )


@needs_v5
def test_a_fleet_with_an_unloadable_model_gives_its_json_row_and_exit_3(capsys, zoo_folder, tmp_path):
    missing = str(tmp_path / "no-such-model")
    code, out, _ = _cli(
        capsys, "scan", str(zoo_folder("np_buffer")), missing, "--trust-remote-code", "--format", "json"
    )
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 3
    assert [(r["model"], r["ok"], r["schema_version"]) for r in rows] == [
        (str(zoo_folder("np_buffer")), False, 1),
        (missing, False, 1),
    ]
    assert (
        rows[1]["scanned"] is False
        and rows[1]["findings"] == []
        and rows[1]["error"]["message"]
        and rows[1]["error"]["hint"]
    )
    assert rows[1]["error"]["kind"] == "ModelNotFoundError"


@needs_v5
def test_a_baseline_keeps_known_findings_out_and_reports_new_and_fixed(capsys, zoo_folder, tmp_path):
    baseline = tmp_path / "baseline.json"
    broken = str(zoo_folder("np_buffer"))
    code, _, err = _cli(
        capsys, "audit", broken, "--trust-remote-code", "--baseline", str(baseline), "--write-baseline"
    )
    assert code == 0 and "wrote 4 finding(s) to the baseline" in err
    assert len(json.loads(baseline.read_text())["findings"]) == 4
    code, out, err = _cli(
        capsys, "audit", broken, "--trust-remote-code", "--baseline", str(baseline), "--format", "json"
    )
    assert code == 0 and not [f for f in json.loads(out)["findings"] if f["status"] != "initialized"]
    assert "4 known finding(s) not shown" in err
    # a copy elsewhere is the same model: its findings are known too (fingerprints hold no paths)
    copy = _copy(zoo_folder, "np_buffer", tmp_path / "elsewhere")
    code, _, err = _cli(capsys, "scan", copy, "--trust-remote-code", "--baseline", str(baseline))
    assert code == 0 and "4 known finding(s) not shown" in err
    # a finding the baseline does not know fails; one it knows that is gone is reported fixed
    data = json.loads(baseline.read_text())
    fingerprint = next(iter(data["findings"]))
    gone = data["findings"].pop(fingerprint)
    data["findings"]["0" * 64] = {**gone, "tensor": "positions.removed"}
    baseline.write_text(json.dumps(data))
    code, out, err = _cli(capsys, "audit", broken, "--trust-remote-code", "--baseline", str(baseline))
    assert code == 1 and gone["tensor"] in out
    assert "3 known finding(s) not shown; fixed since: positions.removed" in err


def test_a_bad_baseline_is_one_error(capsys, tmp_path, zoo_folder):
    bad = tmp_path / "baseline.json"
    bad.write_text("[1, 2]")
    code, out, err = _cli(capsys, "scan", str(zoo_folder("clean")), "--trust-remote-code", "--baseline", str(bad))
    assert (
        code == 2 and "is not a loadguard baseline" in err and "Hint: write it again with --write-baseline FILE" in err
    )
    code, _, err = _cli(capsys, "scan", str(zoo_folder("clean")), "--write-baseline")
    assert code == 2 and "--write-baseline needs --baseline FILE" in err


OUTPUT_SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "loadguard-output.schema.json").read_text()
)


def test_json_output_follows_its_schema(capsys, zoo_folder, tmp_path):
    jsonschema.Draft202012Validator.check_schema(OUTPUT_SCHEMA)
    validate = jsonschema.Draft202012Validator(OUTPUT_SCHEMA).validate
    missing = str(tmp_path / "no-such-model")
    documents = []
    for name in ("np_buffer", "clean"):
        documents.append(
            json.loads(_cli(capsys, "audit", str(zoo_folder(name)), "--trust-remote-code", "--format", "json")[1])
        )
    documents.append(json.loads(_cli(capsys, "audit", missing, "--format", "json")[1]))
    code, out, _ = _cli(
        capsys,
        "scan",
        str(zoo_folder("np_buffer")),
        str(zoo_folder("typing_alias")),
        missing,
        "--trust-remote-code",
        "--format",
        "json",
    )
    documents += [json.loads(line) for line in out.splitlines()]
    for document in documents:
        validate(document)
        assert "seconds" not in document  # two runs print the same document
    with pytest.raises(jsonschema.ValidationError):
        validate(
            {**documents[0], "findings": [{**documents[0]["findings"][0], "status": "fine"}]}
            if documents[0]["findings"]
            else {"schema_version": 2}
        )
    code, out, _ = _cli(
        capsys, "audit", str(zoo_folder("clean")), "--trust-remote-code", "--format", "json", "--timings"
    )
    assert set(json.loads(out)["seconds"]) >= {"reference"} or json.loads(out)["seconds"]


def test_offline_is_told_apart_from_missing(capsys):
    from loadguard._files.hub import failure
    from loadguard.errors import HubUnreachableError

    error = chained(
        OSError("We couldn't connect to 'https://huggingface.co' to load the files"),
        ConnectionError("[Errno -2] Name or service not known"),
    )
    offline = failure("org/model", error, offline=False)
    assert (
        isinstance(offline, HubUnreachableError)
        and "offline (the Hugging Face Hub cannot be reached from here)" in offline.message
    )
    assert isinstance(failure("org/model", RuntimeError("anything"), offline=True), HubUnreachableError)
    # what the Hub answers (404, 401, 403) is told apart over real HTTP: tests/files/test_hub.py
    # through the CLI (the suite runs with HF_HUB_OFFLINE=1): a fleet row says offline, by kind
    code, out, _ = _cli(capsys, "scan", "someorg/not-cached-here", "--format", "json")
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert code == 2 and row["error"]["kind"] == "HubUnreachableError" and "offline" in row["error"]["message"]


@needs_v5
def test_compare_and_trace_travel_too(capsys, zoo_folder, tmp_path, monkeypatch):
    """What a run did wrong is a result at the line behind it (a crash's line, the class NaN first came out of), with the
    tensors the load left wrong; a clean run has no result."""
    monkeypatch.chdir(tmp_path)
    fingerprints = []
    for copy in ("first", "second"):
        folder = _copy(zoo_folder, "np_buffer", tmp_path / copy / "np_buffer")
        code, out, err = _cli(capsys, "compare", folder, "--trust-remote-code", "--format", "sarif")
        assert code == 1, err
        document = json.loads(out)
        jsonschema.validate(document, SCHEMA)
        results = {r["ruleId"]: r for r in document["runs"][0]["results"]}
        raised = results["compare/raised"]
        assert "IndexError in positions (LgToyPositions)" in raised["message"]["text"]
        location = raised["locations"][0]["physicalLocation"]
        assert "self.index" in _line(folder, location["artifactLocation"]["uri"], location["region"]["startLine"])
        assert results["non_persistent_buffer/uninitialized"]["properties"]["tensor"] in (
            "positions.index",
            "positions.table",
        )
        rules = document["runs"][0]["tool"]["driver"]["rules"]
        assert any(r["id"] == "compare/raised" and "built eagerly" in r["fullDescription"]["text"] for r in rules)
        fingerprints.append(sorted(r["partialFingerprints"]["loadguardFinding/v1"] for r in results.values()))
    assert fingerprints[0] == fingerprints[1]

    folder = _copy(zoo_folder, "overwritten", tmp_path / "overwritten")
    code, out, _ = _cli(capsys, "compare", folder, "--trust-remote-code", "--format", "junit")
    failure = ET.fromstring(out).find(".//failure")
    assert code == 1 and failure.get("type") == "differ" and "lm_head.weight (overwritten)" in failure.text

    folder = _copy(zoo_folder, "missing_key", tmp_path / "missing_key")
    code, out, _ = _cli(capsys, "trace", folder, "--trust-remote-code", "--format", "github")
    assert code == 1
    file, line = out.split("::error file=")[1].split(",title=")[0].split(",line=")
    assert "class LgToyForCausalLM" in Path(file).read_text().splitlines()[int(line) - 1]
    assert "non-finite tensors in it or around it: logit_scale" in out

    clean = _copy(zoo_folder, "clean", tmp_path / "clean")
    for command in ("compare", "trace"):
        code, out, err = _cli(capsys, command, clean, "--trust-remote-code", "--format", "sarif")
        assert code == 0 and json.loads(out)["runs"][0]["results"] == [], err


def test_table_is_the_default_format_and_human_its_other_name(capsys, zoo_folder):
    folder = str(zoo_folder("clean"))
    outputs = [
        _cli(capsys, "audit", folder, "--trust-remote-code", *fmt)
        for fmt in ((), ("--format", "table"), ("--format", "human"))
    ]
    assert (
        outputs[0][0] == 0
        and outputs[0][1] == outputs[1][1] == outputs[2][1]
        and "non_persistent_buffer" in outputs[0][1]
    )
    code, _, err = _cli(capsys, "audit", folder, "--format", "yaml")
    assert code == 2 and "'table'" in err


def test_the_format_is_chosen_in_one_place():
    """The commands that print findings hand their result to formats.render (through cli._output.write): none of them
    branches on the format itself."""
    import re

    cli = Path(__file__).resolve().parents[2] / "src" / "loadguard" / "cli"
    for name in ("audit", "scan", "matrix", "_matrix_outputs", "compare", "trace", "_reference"):
        text = (cli / f"{name}.py").read_text()
        assert not re.search(r"\bfmt\s*(==|!=)|elif fmt\b|if fmt\b", text), name
        assert "json.dumps" not in text, name  # the JSON emitter (formats/jsondoc) serializes


def test_a_native_sweep_in_junit_and_sarif(capsys):
    code, out, err = _cli(capsys, "scan", "--native", "--match", "LlamaForCausalLM", "--format", "junit")
    cases = ET.fromstring(out).findall(".//testcase")
    assert code in (0, 1) and "LlamaForCausalLM (llama)" in [c.get("name") for c in cases], err
    code, out, _ = _cli(capsys, "scan", "--native", "--match", "LlamaForCausalLM", "--format", "sarif")
    jsonschema.validate(json.loads(out), SCHEMA)
