"""loadguard matrix: per-version environments (uv, cached, torch shared), cells in fresh processes, bisect."""

from __future__ import annotations

import importlib
import json
import os

import pytest

from loadguard._infra import envs
from loadguard.errors import InvalidOptionError

from ..conftest import TRANSFORMERS_VERSION, environments_cache

matrix_module = importlib.import_module("loadguard._matrix.matrices")

V4, V5 = "4.57.6", "5.25.0"  # the two lines this project pins (constraints-compat.txt, constraints.txt)


def test_specifiers_expand_to_released_versions_spread_evenly(monkeypatch):
    offered = ["5.25.0", "5.24.0", "5.23.0rc1", "5.12.0", "5.3.0", "5.0.0", "4.57.6", "4.57.1", "4.0.0"]
    monkeypatch.setattr(envs, "_index_versions", lambda: offered)
    assert envs.released_versions(">=5,<5.25") == ["5.0.0", "5.3.0", "5.12.0", "5.24.0"]  # no pre-release, no 5.25
    assert envs.released_versions(">=5,<5.25", max_versions=2) == ["5.0.0", "5.24.0"]
    assert envs.released_versions(">=5,<5.25", max_versions=3) == ["5.0.0", "5.12.0", "5.24.0"]
    with pytest.raises(Exception, match="neither a version nor a version specifier"):
        envs.released_versions("five")


def test_bisect_finds_the_first_changed_version_in_log2_cells(monkeypatch, tmp_path):
    versions = [V4] + [f"5.{minor}.0" for minor in range(25)]
    monkeypatch.setattr(envs, "released_versions", lambda spec, max_versions=None: list(versions))
    monkeypatch.setattr(
        envs,
        "environment",
        lambda version: envs.Environment(version, envs.cache_root(), ok=version != "5.7.0", reason="no wheel"),
    )
    log = tmp_path / "ran.txt"  # each cell runs in a child of the executor: it says what ran in a file

    def fake_run_in(environment, cells, full, checks=None, limits=None):
        with open(log, "a") as stream:
            stream.write(environment.version + "\n")
        if not environment.ok:
            return [matrix_module.Cell(cells[0][0], environment.version, "unavailable", error=environment.reason)]
        broken = environment.version != V4 and int(environment.version.split(".")[1]) >= 9
        report = {
            "findings": [{"tensor": "resampler.pos_embed", "status": "uninitialized"}] if broken else [],
            "workarounds": [],
        }
        return [matrix_module.Cell(cells[0][0], environment.version, "findings" if broken else "clean", report)]

    monkeypatch.setattr(matrix_module, "_run_in", fake_run_in)
    result = matrix_module.bisect("m", V4, "5.24.0")  # a made-up history
    ran = log.read_text().split()
    assert result.first_changed == "5.9.0" and result.candidates == 26
    assert len(ran) <= 2 + 6 and len(set(ran)) == len(ran)  # about log2(26) cells, none twice
    again = matrix_module.Bisection.from_dict(json.loads(json.dumps(result.to_dict())))  # what --format json wrote
    assert again == result and again.cells[0].status is matrix_module.CellStatus(result.cells[0].status)
    monkeypatch.setattr(
        matrix_module,
        "_run_in",
        lambda environment, cells, full, checks=None, limits=None: [
            matrix_module.Cell("m", environment.version, "clean", {"findings": []})
        ],
    )
    assert matrix_module.bisect("m", V4, "5.24.0").first_changed is None


@pytest.fixture(scope="session")
def environment_cache(tmp_path_factory):
    """Environments for the two pinned lines, created once per test session in a cache of its own."""
    return environments_cache(tmp_path_factory, (V4, V5))


def test_matrix_over_the_two_lines(environment_cache, zoo_folder, monkeypatch, capsys):
    """4.57: clean; 5.x: pos_embed broken for minicpmv_like, clean for the fixed one; minicpmv-pos-cache not needed
    (stale) on 4.57, needed on 5.x for the first, stale for the second; a version that cannot be installed is a
    column saying why."""
    from loadguard.cli import main

    monkeypatch.setenv("LOADGUARD_CACHE", str(environment_cache))
    broken, fixed = str(zoo_folder("minicpmv_like")), str(zoo_folder("minicpmv_like_fixed"))
    args = [
        "matrix",
        broken,
        fixed,
        "--transformers",
        f"{V4},{V5},99.0.0",
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--workaround",
        "minicpmv-pos-cache",
        "--format",
        "json",
        "--jobs",
        "2",
    ]
    with pytest.raises(SystemExit) as info:
        main(args)
    document = json.loads(capsys.readouterr().out)
    assert info.value.code == 1
    cells = {(c["model"], c["transformers"]): c for c in document["cells"]}
    assert cells[(broken, V4)]["verdict"] == "clean" and cells[(fixed, V4)]["verdict"] == "clean"
    assert cells[(broken, V5)]["verdict"] == "resampler.pos_embed (uninitialized)"
    assert cells[(fixed, V5)]["verdict"] == "clean"
    assert cells[(broken, "99.0.0")]["status"] == "unavailable" and cells[(broken, "99.0.0")]["error"]
    report = cells[(broken, V5)]["report"]  # the scan's own schema, per cell: two matrices can be diffed
    assert (
        report["mode"] == "scan"
        and report["versions"]["transformers"] == V5
        and report["findings"][0]["predicted"] is True
    )
    assert cells[(broken, V4)]["report"]["versions"]["transformers"] == V4
    rows = {
        row["model"]: row["transformers"]
        for row in document["workarounds"]
        if row["workaround"] == "minicpmv-pos-cache"
    }
    assert rows[broken] == {V4: "stale", V5: "needed", "99.0.0": "unknown"}
    assert rows[fixed] == {V4: "stale", V5: "stale", "99.0.0": "unknown"}
    environments = {e["transformers"]: e for e in document["environments"]}
    assert environments[V4]["ok"] and environments[V5]["ok"] and not environments["99.0.0"]["ok"]
    assert environments[V4]["created"] is False  # made once for the session, reused here
    for version in (V4, V5):  # the scan's self-check ran in each environment before its cells
        assert (
            environments[version]["selfcheck"]["ok"] is True and environments[version]["selfcheck"]["differing"] == []
        )
    assert environments["99.0.0"]["selfcheck"] is None
    assert TRANSFORMERS_VERSION  # the running interpreter's own transformers is untouched by all this


@pytest.mark.slow
def test_bisect_finds_when_transformers_stopped_overwriting_every_loaded_weight(
    zoo_folder, environment_cache, monkeypatch
):
    """Real environments (about 7 of them), full audits: between 5.0.0 (an unguarded _init_weights overwrote every
    weight of the custom model) and 5.25.0 (only the head whose module holds a non-persistent buffer)."""
    monkeypatch.setenv("LOADGUARD_CACHE", str(environment_cache))
    result = matrix_module.bisect(
        str(zoo_folder("overwritten")), "5.0.0", "5.25.0", full=True, options=["--trust-remote-code"]
    )
    assert result.first_changed in ("5.2.0", "5.3.0") and len(result.cells) <= 2 + 5
    before = next(c for c in result.cells if c.transformers == "5.0.0")
    after = next(c for c in result.cells if c.transformers == result.first_changed)
    assert len(before.failures) == 13 and after.failures == ["lm_head.weight"]
    print(
        f"first version that overwrites only the head: {result.first_changed} ({len(result.cells)} of {result.candidates} versions run)"
    )


def test_native_matrix_shows_only_what_a_release_changed(environment_cache, monkeypatch, capsys):
    """Llama's classes under 4.57.6 and the pinned 5.x, each scanned in its own environment: only classes whose verdict
    differs are listed (here: those one release has and the other lacks), with both verdicts."""
    from loadguard.cli import main

    monkeypatch.setenv("LOADGUARD_CACHE", str(environment_cache))
    with pytest.raises(SystemExit) as info:
        main(
            [
                "matrix",
                "--native",
                "--transformers",
                f"{V4},{V5}",
                "--match",
                "Llama*",
                "--format",
                "json",
                "--jobs",
                "2",
            ]
        )
    document = json.loads(capsys.readouterr().out)
    assert info.value.code in (0, 1) and document["errors"] == {} and document["classes"] >= 5
    changed = {row["class"]: row["verdicts"] for row in document["changed"]}
    assert "LlamaForCausalLM (llama)" not in changed  # clean under both
    for verdicts in changed.values():
        assert set(verdicts) == {V4, V5} and len(set(verdicts.values())) == 2
    assert all(check["ok"] for check in document["selfchecks"].values())


def test_a_version_string_never_becomes_a_path_outside_the_cache(tmp_path, monkeypatch, capsys):
    """`--transformers "x/../../../../victim"` once built an environment path from the string and removed the folder it
    resolved to; now a version is a PEP 440 version or a specifier, refused before any path exists."""
    from loadguard.cli import main

    cache, victim = tmp_path / "cache", tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    monkeypatch.setenv("LOADGUARD_CACHE", str(cache))
    depth = "/".join([".."] * (len(cache.parts) + 3))
    for hostile in (f"x/{depth}{victim}", "../victim", "5.24.0/../../victim"):
        with pytest.raises(SystemExit) as info:
            main(["matrix", str(tmp_path), "--transformers", hostile])
        assert info.value.code == 2
        assert "is not a transformers version" in capsys.readouterr().err
    assert (victim / "keep.txt").read_text() == "mine" and not cache.exists()
    with pytest.raises(InvalidOptionError):
        envs.environment("../victim")


def test_deletes_and_records_stay_inside_their_root(tmp_path):
    from loadguard._infra.paths import inside, remove_tree, write_atomically

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "env").mkdir(parents=True)
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (root / "link").symlink_to(outside, target_is_directory=True)
    remove_tree(root, root / "link", "a link")  # unlinked, never followed
    assert (outside / "keep.txt").exists() and not (root / "link").exists()
    for escape in (root / ".." / "outside", root):
        with pytest.raises(InvalidOptionError, match="outside"):
            remove_tree(root, escape, "a folder")
    assert (outside / "keep.txt").exists()
    assert inside(root, root / "env", "x") == (root / "env").resolve()
    write_atomically(root / "record.json", "{}")
    assert (root / "record.json").read_text() == "{}" and [
        p.name for p in root.iterdir() if p.name.endswith(".tmp")
    ] == []


def test_two_matrices_sharing_a_cache_at_the_same_time_both_finish(environment_cache, zoo_folder, tmp_path):
    """Two processes, one cache, the same environment: each waits on the environment's lock, neither rebuilds or deletes
    what the other uses, both give the same, correct cells."""
    import subprocess
    import sys

    broken = str(zoo_folder("minicpmv_like"))
    env = {**os.environ, "LOADGUARD_CACHE": str(environment_cache)}
    command = [
        sys.executable,
        "-m",
        "loadguard",
        "matrix",
        broken,
        "--transformers",
        V5,
        "--trust-remote-code",
        "--workaround",
        "auto",
        "--format",
        "json",
    ]
    runs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    results = [(run.wait(timeout=600), run.stdout.read()) for run in runs]
    verdicts = []
    for code, out in results:
        assert code == 1, out[-2000:]
        (cell,) = json.loads(out)["cells"]
        verdicts.append(cell["verdict"])
    assert verdicts == ["resampler.pos_embed (uninitialized)"] * 2


@pytest.mark.parametrize("full", [False, True])
def test_a_cell_whose_code_sleeps_ends_at_the_timeout(
    environment_cache, zoo_folder, tmp_path, monkeypatch, capsys, full
):
    """Matrix cells had no timeout: a scan cell and a --full audit cell now run in a child the worker kills."""
    import shutil

    from loadguard.cli import main

    folder = tmp_path / "sleeps"
    shutil.copytree(zoo_folder("clean"), folder)
    with open(folder / "modeling_lgtoy.py", "a") as handle:
        handle.write("\nimport time\ntime.sleep(600)\n")
    monkeypatch.setenv("LOADGUARD_CACHE", str(environment_cache))
    args = [
        "matrix",
        str(folder),
        "--transformers",
        V5,
        "--trust-remote-code",
        "--timeout",
        "5",
        "--format",
        "json",
    ] + (["--full"] if full else [])
    with pytest.raises(SystemExit):
        main(args)
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    assert cell["status"] == "error" and "timed out after 5 s" in cell["error"], cell


def _finding(tensor: str, status: str = "uninitialized") -> dict:
    return {
        "tensor": tensor,
        "status": status,
        "kind": "buffer",
        "check": "non_persistent_buffer",
        "dtype": "float32",
        "shape": [4],
        "device": "cpu",
        "detail": f"{tensor} holds leftover memory",
    }


def _synthetic():
    from loadguard._matrix.matrices import Cell, Matrix

    report = lambda *tensors: {"findings": [_finding(t) for t in tensors], "workarounds": []}  # noqa: E731
    cells = [
        Cell("steady", "5.24.0", "clean", report()),
        Cell("steady", "5.25.0", "clean", report()),
        Cell("broke", "5.24.0", "clean", report()),
        Cell("broke", "5.25.0", "findings", report("pos_embed")),
        Cell("healed", "5.24.0", "findings", report("lm_head.weight")),
        Cell("healed", "5.25.0", "clean", report()),
        Cell("shifted", "5.24.0", "findings", report("a")),
        Cell("shifted", "5.25.0", "findings", report("b")),
        Cell("crashes", "5.24.0", "clean", report()),
        Cell("crashes", "5.25.0", "error", None, error="KeyError: 'type'"),
        Cell("away", "5.24.0", "clean", report()),
        Cell("away", "5.25.0", "unavailable", None, error="not installable"),
    ]
    models = tuple(dict.fromkeys(c.model for c in cells))
    return Matrix(models, ("5.24.0", "5.25.0"), tuple(cells), ())


def test_diff_names_how_each_verdict_moved():
    from loadguard._matrix.changes import diff

    changes = {c.model: c for c in diff(_synthetic(), "5.24.0", "5.25.0")}
    assert {m: c.change for m, c in changes.items()} == {
        "steady": "unchanged",
        "broke": "new failure",
        "healed": "fixed",
        "shifted": "changed finding",
        "crashes": "newly broken",
        "away": "not compared",
    }
    assert changes["shifted"].added == ("b (uninitialized)",) and changes["shifted"].removed == ("a (uninitialized)",)
    assert [m for m, c in changes.items() if c.worse] == ["broke", "shifted", "crashes"]


def test_matrix_diff_through_the_cli_in_every_format(monkeypatch, capsys):
    from loadguard.cli import main

    asked = {}

    def fake_run(models, versions, **kwargs):
        asked["versions"] = versions
        return _synthetic()

    monkeypatch.setattr(matrix_module, "run", fake_run)
    outputs = {}
    for fmt in ("human", "json", "markdown"):
        with pytest.raises(SystemExit) as info:
            main(["matrix", "steady", "broke", "--diff", "5.24.0", "5.25.0", "--format", fmt])
        outputs[fmt] = capsys.readouterr()
        assert info.value.code == 1
    assert asked["versions"] == ["5.24.0", "5.25.0"]
    document = json.loads(outputs["json"].out)
    assert [c["change"] for c in document["changes"]][:4] == ["unchanged", "new failure", "fixed", "changed finding"]
    assert "| broke | new failure | clean | pos_embed (uninitialized) |" in outputs["markdown"].out
    assert "3 of 6 model(s) worse under transformers 5.25.0: broke, shifted, crashes" in outputs["human"].err


def test_matrix_diff_in_sarif_github_and_junit_fails_only_the_models_that_got_worse(monkeypatch, capsys):
    import xml.etree.ElementTree as ET

    from loadguard.cli import main

    monkeypatch.setattr(matrix_module, "run", lambda models, versions, **kwargs: _synthetic())
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    outputs = {}
    for fmt in ("sarif", "github", "junit"):
        with pytest.raises(SystemExit) as info:
            main(["matrix", "steady", "broke", "--diff", "5.24.0", "5.25.0", "--format", fmt])
        outputs[fmt] = capsys.readouterr().out
        assert info.value.code == 1
    junit = ET.fromstring(outputs["junit"])
    failed = sorted(
        case.get("name").split(":")[0]
        for case in junit.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    )
    assert failed == ["broke", "crashes", "shifted"] and junit.get("tests") == "6"
    results = json.loads(outputs["sarif"])["runs"][0]["results"]
    assert sorted(r["properties"]["tensor"] for r in results) == [
        "b",
        "pos_embed",
    ]  # what is wrong under 5.25.0, in the models that got worse
    assert (
        "broke: new failure under transformers 5.25.0 (was: clean)" in outputs["github"]
        and "healed" not in outputs["github"]
    )


def test_matrix_cells_in_sarif_github_and_junit(monkeypatch, capsys, zoo_folder):
    from loadguard._matrix.matrices import Cell, Matrix
    from loadguard.cli import main

    folder = str(zoo_folder("np_buffer"))
    finding = {
        "tensor": "positions.index",
        "kind": "buffer",
        "check": "non_persistent_buffer",
        "status": "uninitialized",
        "dtype": "int64",
        "shape": [64],
        "device": "cpu",
        "persistent": False,
        "alias_of": None,
        "max_abs_diff": None,
        "detail": "64 of 64 values are INT_MAX",
        "predicted": True,
        "module": "positions",
        "location": "modeling_lgtoy.py:36",
    }
    report = {
        "model": folder,
        "model_class": "LgToyForCausalLM",
        "mode": "scan",
        "findings": [finding],
        "checks": [],
        "workarounds": [],
    }
    cells = (
        Cell(folder, "5.24.0", "findings", report),
        Cell(folder, "5.25.0", "error", None, error="KeyError: 'type'", hint="--workaround auto"),
    )
    monkeypatch.setattr(matrix_module, "run", lambda *a, **k: Matrix((folder,), ("5.24.0", "5.25.0"), cells, ()))
    with pytest.raises(SystemExit):
        main(["matrix", folder, "--transformers", "5.24.0,5.25.0", "--format", "github"])
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0].startswith("::error file=")
        and "modeling_lgtoy.py,line=36," in out[0]
        and "@ transformers 5.24.0" in out[0]
    )
    assert out[1].startswith(f"::error title=loadguard%3A could not check {folder} @ transformers 5.25.0::")
    with pytest.raises(SystemExit) as info:
        main(["matrix", folder, "--bisect", "5.24.0", "5.25.0", "--format", "sarif"])
    assert info.value.code == 2 and "is for a matrix's cells" in capsys.readouterr().err


def test_loadguard_matrix_is_callable_and_returns_the_matrix_json_prints(monkeypatch):
    import loadguard

    monkeypatch.setattr(envs, "environment", lambda version: envs.Environment(version, envs.cache_root(), ok=True))
    monkeypatch.setattr(
        matrix_module,
        "_run_in",
        lambda environment, cells, full, checks=None, limits=None: [
            matrix_module.Cell(
                m,
                environment.version,
                "clean" if environment.version == V4 else "findings",
                {"findings": [] if environment.version == V4 else [{"tensor": "t", "status": "uninitialized"}]},
            )
            for m, _ in cells
        ],
    )
    from loadguard._matrix.matrices import Cell  # importing the module does not replace the function

    result = loadguard.matrix(["a", "b"], [V4, V5])
    assert callable(loadguard.matrix) and isinstance(result.cells[0], Cell)
    assert [(c.model, c.transformers, c.status) for c in result.cells] == [
        ("a", V4, "clean"),
        ("a", V5, "findings"),
        ("b", V4, "clean"),
        ("b", V5, "findings"),
    ]
    assert result.cell("b", V5).failures == ["t"] and json.loads(json.dumps(result.to_dict()))["transformers"] == [
        V4,
        V5,
    ]


def test_an_interrupted_matrix_resumes_with_only_the_cells_it_lacks(monkeypatch, tmp_path, capsys):
    """Cells stream to the resume file as they finish; run again with it, only the missing cells run (the ones it holds
    keep what they said: marked here so a rerun would show), a line the interruption cut short is ignored."""
    from loadguard.cli import main

    ran = tmp_path / "ran.txt"
    monkeypatch.setattr(envs, "environment", lambda version: envs.Environment(version, envs.cache_root(), ok=True))

    def fake_run_in(environment, cells, full, checks=None, limits=None):  # runs in the executor's forked child
        with open(ran, "a") as stream:
            stream.write("".join(f"{m}@{environment.version}\n" for m, _ in cells))
        return [
            matrix_module.Cell(
                m,
                environment.version,
                "clean",
                {"findings": [], "workarounds": []},
                ran_with={"transformers": environment.version},
            )
            for m, _ in cells
        ]

    monkeypatch.setattr(matrix_module, "_run_in", fake_run_in)
    resume = tmp_path / "cells.jsonl"
    marked = {"findings": [{"tensor": "from-the-first-run", "status": "uninitialized"}], "workarounds": []}
    earlier = [matrix_module.Cell(m, V4, "findings", marked).to_dict() for m in ("a", "b")]
    resume.write_text("".join(json.dumps(c) + "\n" for c in earlier) + '{"model": "a", "transf')
    with pytest.raises(SystemExit) as info:
        main(["matrix", "a", "b", "--transformers", f"{V4},{V5}", "--resume", str(resume), "--format", "json"])
    captured = capsys.readouterr()
    cells = {(c["model"], c["transformers"]): c for c in json.loads(captured.out)["cells"]}
    assert sorted(ran.read_text().split()) == [f"a@{V5}", f"b@{V5}"]  # only what the file lacked
    assert (
        cells[("a", V4)]["verdict"] == "from-the-first-run (uninitialized)" and cells[("a", V5)]["verdict"] == "clean"
    )
    assert cells[("b", V5)]["ran_with"] == {"transformers": V5} and info.value.code == 1
    assert "2 of 4 cell(s) already run there, 2 to go" in captured.err
    rows = [json.loads(line) for line in resume.read_text().splitlines()[:2] + resume.read_text().splitlines()[3:]]
    assert sorted((r["model"], r["transformers"]) for r in rows) == sorted(cells)  # the new cells were appended
    ran.unlink()
    with pytest.raises(SystemExit):
        main(["matrix", "a", "b", "--transformers", f"{V4},{V5}", "--resume", str(resume), "--format", "json"])
    assert not ran.exists() and "4 of 4 cell(s) already run there, 0 to go" in capsys.readouterr().err


def test_the_limits_the_user_sets_hold_for_bisect_steps_and_native_sweeps(monkeypatch, tmp_path, capsys):
    from loadguard._matrix import native as matrix_native
    from loadguard.cli import main
    from loadguard.cli._limits import memory_limit

    versions = [V4, "5.0.0"]
    monkeypatch.setattr(envs, "released_versions", lambda spec, max_versions=None: list(versions))
    monkeypatch.setattr(envs, "environment", lambda version: envs.Environment(version, envs.cache_root(), ok=True))
    log = tmp_path / "limits.jsonl"

    def fake_run_in(
        environment, cells, full, checks=None, limits=None
    ):  # in the executor's child: it writes what it got
        with open(log, "a") as stream:
            stream.write(json.dumps(limits) + "\n")
        return [matrix_module.Cell(cells[0][0], environment.version, "clean", {"findings": [], "workarounds": []})]

    monkeypatch.setattr(matrix_module, "_run_in", fake_run_in)
    with pytest.raises(SystemExit):
        main(["matrix", "m", "--bisect", V4, "5.0.0", "--timeout", "7", "--memory-limit", "1GB"])
    expected = {"timeout": 7.0, "memory_limit": memory_limit("1GB", 1, fleet=True)}
    assert [json.loads(line) for line in log.read_text().splitlines()] == [expected, expected]

    asked = []
    monkeypatch.setattr(
        matrix_native,
        "run",
        lambda versions, **kwargs: asked.append(kwargs) or matrix_native.NativeDiff(tuple(versions), {}, {}, {}, {}),
    )
    for extra, timeout in ((["--timeout", "42", "--memory-limit", "2GB"], 42.0), ([], 300.0)):
        with pytest.raises(SystemExit):
            main(["matrix", "--native", "--transformers", f"{V4},{V5}", *extra])
        assert asked[-1]["timeout"] == timeout and asked[-1]["memory_limit"] == ("2GB" if extra else "auto")
    capsys.readouterr()
