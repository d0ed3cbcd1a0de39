"""``[tool.loadguard]`` in pyproject.toml: defaults a team sets once, overridden by the command line, shown by
``loadguard config``; read by the pytest plugin when ``--loadguard`` is not given."""

from __future__ import annotations

import json

import pytest

from loadguard._infra.settings import load
from loadguard.errors import InvalidOptionError

from ..conftest import IS_V5, TRANSFORMERS_VERSION
from ..conftest import run_cli as _cli

pytest_plugins = ["pytester"]
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} does not break these loads")


def _project(folder, text: str):
    (folder / "pyproject.toml").write_text(text)
    return folder


def test_the_nearest_table_is_read_and_checked(tmp_path):
    project = _project(
        tmp_path, '[project]\nname = "x"\n\n[tool.loadguard]\nformat = "sarif"\ntimeout = 60\njobs = 2\n'
    )
    (project / "sub" / "deeper").mkdir(parents=True)
    settings = load(project / "sub" / "deeper")
    assert settings.source == project / "pyproject.toml"
    assert settings.values == {"format": "sarif", "timeout": 60.0, "jobs": 2}
    assert (
        settings.get("color") == "auto"
        and settings.origin("color") == "default"
        and "pyproject.toml" in settings.origin("jobs")
    )
    assert load(tmp_path.parent).source is None or load(tmp_path.parent).source != project / "pyproject.toml"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("trust_remote_code = true", "unknown key 'trust_remote_code'"),  # never from a file: asked for per run
        ('jobs = "two"', "jobs = 'two' is not a whole number"),
        ("workarounds = 3", "is not a list of strings"),
        ('workarounds = ["auto", 1]', "is not a list of strings"),
        ('plugin = "always"', "plugin = 'always' is not one of off, warn, fail, repair"),
    ],
)
def test_a_bad_table_is_one_clear_error(tmp_path, text, said):
    _project(tmp_path, f"[tool.loadguard]\n{text}\n")
    with pytest.raises(InvalidOptionError) as info:
        load(tmp_path)
    assert said in str(info.value)


def test_workarounds_auto_as_a_string_means_the_list(tmp_path):
    """One spelling means the same as the other, as in the marker, the fixtures, loadguard.load and HfRunner."""
    _project(tmp_path, '[tool.loadguard]\nworkarounds = "auto"\n')
    assert load(tmp_path).get("workarounds") == ["auto"]
    _project(tmp_path, '[tool.loadguard]\nworkarounds = ["auto"]\n')
    assert load(tmp_path).get("workarounds") == ["auto"]


@needs_v5
def test_commands_take_their_defaults_from_the_table_and_flags_win(capsys, tmp_path, monkeypatch, zoo_folder):
    monkeypatch.chdir(_project(tmp_path, '[tool.loadguard]\nformat = "json"\nworkarounds = ["auto"]\n'))
    folder = str(zoo_folder("v4_rope_scaling"))  # needs a workaround to load at all
    code, out, _ = _cli(capsys, "audit", folder, "--trust-remote-code")
    assert code == 1 and json.loads(out)["ok"] is False
    code, out, _ = _cli(capsys, "audit", folder, "--trust-remote-code", "--format", "human")
    assert code == 1 and out.startswith(folder)
    code, out, _ = _cli(capsys, "config", "--format", "json")
    rows = {row["key"]: row for row in json.loads(out)["settings"]}
    assert code == 0 and rows["workarounds"]["value"] == ["auto"] and "pyproject.toml" in rows["workarounds"]["source"]
    assert rows["baseline"]["source"] == "default"


def test_a_bad_table_stops_every_command_with_one_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path, "[tool.loadguard]\nformats = 1\n"))
    code, out, err = _cli(capsys, "env")
    assert code == 2 and out == "" and "unknown key 'formats'" in err and err.count("\n") == 2


@needs_v5
def test_the_plugin_mode_comes_from_the_table(pytester):
    pytester.makepyprojecttoml('[tool.loadguard]\nplugin = "fail"\npoison = true\n')
    pytester.makepyfile(
        """
        from loadguard import zoo

        def test_load(tmp_path):
            from transformers import AutoModelForCausalLM
            AutoModelForCausalLM.from_pretrained(zoo.build("np_buffer", tmp_path / "m"), trust_remote_code=True)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "positions.table (uninitialized at " in result.stdout.str()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--loadguard=off")
    result.assert_outcomes(passed=1)
