"""The scan's self-check: proves the installed transformers once per combination, records it, and makes scans refuse
where the prediction no longer equals a full audit."""

from __future__ import annotations

import json

import pytest

import loadguard
from loadguard._scan import selfcheck
from loadguard.errors import ScanError

from ..conftest import IS_V5, TRANSFORMERS_VERSION


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADGUARD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_selfcheck_passes_records_and_proves_this_version(own_cache, capsys):
    from loadguard.cli import main

    with pytest.raises(SystemExit) as info:
        main(["selfcheck", "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert info.value.code == 0 and document["ok"] is True and document["transformers"] == TRANSFORMERS_VERSION
    assert {case["entry"] for case in document["cases"]} == {name for name, _ in selfcheck.CASES}
    assert all(case["agree"] and case["differing"] == [] for case in document["cases"])
    if IS_V5:  # the cases cover every failing status a scan predicts
        statuses = {status for case in document["cases"] for status in case["audited"].values()}
        assert statuses == {"uninitialized", "on_meta", "overwritten"}
    assert document["seconds"] < 10
    assert document["record"].startswith(str(own_cache)) and json.loads(open(document["record"]).read())["ok"] is True
    assert document["proven"] == [TRANSFORMERS_VERSION] == selfcheck.proven_versions()
    assert selfcheck.recorded().cached is True


def test_a_scan_runs_the_selfcheck_once_then_reads_the_record(own_cache, zoo_folder, monkeypatch):
    assert selfcheck.recorded() is None
    report = loadguard.scan(zoo_folder("np_buffer"), trust_remote_code=True)
    assert selfcheck.recorded() is not None and selfcheck.recorded().ok and report.seconds["selfcheck"] > 0
    monkeypatch.setattr(selfcheck, "run", lambda *args, **kwargs: pytest.fail("the record must be reused"))
    loadguard.scan(zoo_folder("np_buffer"), trust_remote_code=True)


@pytest.mark.skipif(
    not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} overwrites nothing: a skipped init step changes no verdict"
)
def test_where_the_prediction_breaks_scans_refuse_naming_the_tensors(own_cache, zoo_folder, monkeypatch, capsys):
    """A transformers whose internals moved (simulated: the init step the scan watches does nothing in scans, while
    full loads still run it): the self-check fails, is recorded failed, and every scan refuses with exit 2."""
    from transformers import PreTrainedModel

    from loadguard.cli import main

    real = PreTrainedModel._initialize_missing_keys

    def moved(self, *args, **kwargs):
        if any(type(t).__name__ == "Weightless" for t in self.parameters()):
            return None  # the scan's weightless load no longer sees initialization
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "_initialize_missing_keys", moved)
    with pytest.raises(ScanError) as info:
        loadguard.scan(zoo_folder("overwritten"), trust_remote_code=True)
    assert "self-check fails on transformers" in info.value.message and ": predicted " in info.value.message
    assert "loadguard audit" in info.value.hint
    assert selfcheck.recorded() is not None and not selfcheck.recorded().ok
    assert "overwritten: lm_head.weight: predicted ok, audited overwritten" in selfcheck.recorded().differing()
    with pytest.raises(SystemExit) as exit_:
        main(["scan", str(zoo_folder("np_buffer")), "--trust-remote-code"])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2
        and "Error: the scan's self-check fails" in err
        and "Hint: audit a full load instead" in err
    )
    assert TRANSFORMERS_VERSION not in selfcheck.proven_versions()
