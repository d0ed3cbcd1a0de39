"""Hub ids for real (issue 37): scans of Hub ids through the unmodified huggingface_hub client against a local Hub
endpoint (tests/files/hubserver.py, ``HF_ENDPOINT``), measured in bytes, with revisions, auth, refusals and faults. Each
command runs as a user runs it: ``python -m loadguard`` in a process of its own, its Hugging Face cache in the test's
folder."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from ..conftest import IS_V5
from .hubserver import HubServer, Repo, seventy_b_shaped

TOKEN = "hf_loadguardTestToken0123456789abcdef"


def _run(hub_url: str, home, *args, token: str | None = None, offline: bool = False, timeout: float = 300):
    env = {
        **os.environ,
        "HF_ENDPOINT": hub_url,
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "LOADGUARD_HUB_READ_TIMEOUT": "1",
        "LOADGUARD_CACHE": str(home / "loadguard"),
    }
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=home
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - start


def _rows(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def np_repo(tmp_path_factory, zoo_folder):
    return Repo.from_folder(zoo_folder("np_buffer"))


def test_a_weightless_scan_fetches_config_code_and_headers_only_and_nothing_twice(np_repo, tmp_path):
    with HubServer({"lg-org/np": np_repo}) as hub:
        code, out, err, _ = _run(
            hub.url,
            tmp_path,
            "scan",
            "lg-org/np",
            "--trust-remote-code",
            "--keys",
            "header",
            "--format",
            "json",
            "--timings",
        )
        (row,) = _rows(out)
        assert code == (1 if IS_V5 else 0), err
        weights = (np_repo.commits[row["revision"]]["model.safetensors"]).stat().st_size
        header = hub.traffic.file_bytes(".safetensors")
        assert 0 < header < weights / 10  # the header's two range reads, never the tensors
        assert (
            row["revision"] == np_repo.refs["main"]
            and row["checkpoint"] == f"lg-org/np@{row['revision']} (safetensors headers)"
        )
        assert row["fetched_bytes"] == hub.traffic.file_bytes() > 0  # what the row says is what the server sent
        hub.traffic.reset()
        code, out, err, _ = _run(
            hub.url,
            tmp_path,
            "scan",
            "lg-org/np",
            "--trust-remote-code",
            "--keys",
            "header",
            "--format",
            "json",
            "--timings",
        )
        (again,) = _rows(out)
        assert hub.traffic.file_bytes() == 0 and again["fetched_bytes"] == 0  # the same revision: from the cache
        assert [f["tensor"] for f in again["findings"]] == [f["tensor"] for f in row["findings"]]


def test_a_70b_shaped_sharded_checkpoint_costs_headers_only(tmp_path):
    weights = seventy_b_shaped(tmp_path / "llama70b")
    with HubServer({"lg-org/llama-70b": Repo.from_folder(tmp_path / "llama70b")}) as hub:
        code, out, err, _ = _run(
            hub.url, tmp_path, "scan", "lg-org/llama-70b", "--keys", "header", "--format", "json", "--timings"
        )
        (row,) = _rows(out)
        assert row["scanned"] is True and code in (0, 1), err
        fetched = hub.traffic.file_bytes()
        assert fetched == row["fetched_bytes"] and fetched <= 2 * 2**20 and fetched <= weights / 100, (
            fetched,
            weights,
        )
        assert hub.traffic.file_bytes(".safetensors") < 30 * 64 * 1024  # 30 headers, two range reads each


def test_revisions_pin_one_commit_in_rows_and_sarif(zoo_folder, tmp_path):
    repo = Repo.from_folder(zoo_folder("minicpmv_like_fixed"))
    broken = repo.add_commit(zoo_folder("minicpmv_like"), ref="v1")
    fixed = repo.refs["main"]
    with HubServer({"lg-org/minicpm": repo}) as hub:
        code, out, err, _ = _run(
            hub.url,
            tmp_path,
            "scan",
            "lg-org/minicpm@v1",
            "lg-org/minicpm",
            "--trust-remote-code",
            "--workaround",
            "auto",
            "--format",
            "json",
        )
        rows = _rows(out)
        assert [r["revision"] for r in rows] == [broken, fixed], err
        if IS_V5:
            assert code == 1 and [f["tensor"] for f in rows[0]["findings"] if f["status"] == "uninitialized"] == [
                "resampler.pos_embed"
            ]
        code, out, err, _ = _run(
            hub.url,
            tmp_path,
            "scan",
            "lg-org/minicpm",
            "--revision",
            "v1",
            "--trust-remote-code",
            "--workaround",
            "auto",
            "--format",
            "sarif",
        )
        results = json.loads(out)["runs"][0]["results"]
        if IS_V5:
            assert results and all(r["properties"]["revision"] == broken for r in results)


@pytest.fixture(scope="module")
def guarded(zoo_folder):
    return {
        "lg-org/private": Repo.from_folder(zoo_folder("clean"), private=True),
        "lg-org/gated": Repo.from_folder(zoo_folder("clean"), gated=True),
        "lg-org/open": Repo.from_folder(zoo_folder("clean")),
    }


REFUSED = {
    "lg-org/private": (
        "HubAccessError",
        "lg-org/private: no such model on the Hub, or a private one this request may not see (401)",
    ),
    "lg-org/gated": ("HubAccessError", "lg-org/gated is gated on the Hub: your token has no access (403)"),
    "lg-org/nope": (
        "HubAccessError",
        "lg-org/nope: no such model on the Hub, or a private one this request may not see (401)",
    ),
    "lg-org/open@no-such-tag": ("ModelNotFoundError", "lg-org/open has no revision 'no-such-tag' on the Hub (404)"),
}


def test_refusals_are_told_apart_and_a_token_opens_the_door(guarded, tmp_path):
    """Anonymous: each refusal its own words and kind in a fleet row (exit 3 with one id that loads); one id alone: one
    Error and one Hint naming HF_TOKEN, exit 2. With the token: the private and gated ones scan, a missing one is 404."""
    with HubServer(guarded, token=TOKEN) as hub:
        code, out, err, _ = _run(
            hub.url, tmp_path, "scan", *REFUSED, "lg-org/open", "--trust-remote-code", "--format", "json"
        )
        rows = {r["model"]: r for r in _rows(out)}
        assert code == 3 and rows["lg-org/open"]["ok"] is True, err
        for model, (kind, message) in REFUSED.items():
            assert (rows[model]["error"]["kind"], rows[model]["error"]["message"]) == (kind, message)
            assert ("HF_TOKEN" in rows[model]["error"]["hint"]) == (kind == "HubAccessError")
        code, out, err, _ = _run(hub.url, tmp_path, "scan", "lg-org/gated", "--trust-remote-code", token="hf_wrong")
        lines = [line for line in err.splitlines() if line.strip()]
        assert (
            code == 2
            and lines[0] == f"Error: {REFUSED['lg-org/gated'][1]}"
            and lines[1].startswith("Hint: ")
            and "HF_TOKEN" in lines[1]
        )
        assert len(lines) == 2, err
        code, out, err, _ = _run(
            hub.url,
            tmp_path,
            "scan",
            "lg-org/private",
            "lg-org/gated",
            "lg-org/nope",
            "--trust-remote-code",
            "--format",
            "json",
            token=TOKEN,
        )
        rows = {r["model"]: r for r in _rows(out)}
        assert rows["lg-org/private"]["ok"] and rows["lg-org/gated"]["ok"] and code == 3, err
        assert rows["lg-org/nope"]["error"]["message"] == "lg-org/nope: no such model on the Hugging Face Hub (404)"


def test_a_token_goes_to_the_endpoint_only_and_into_no_output(guarded, tmp_path):
    """Planted in the environment: sent to the endpoint, never to another host, and in no output of any command."""
    outputs = []
    with HubServer(guarded, token=TOKEN) as hub:
        for args in (
            [
                "scan",
                "lg-org/private",
                "--trust-remote-code",
                "--keys",
                "header",
                "--format",
                "json",
                "--timings",
                "--verbose",
            ],
            ["scan", "lg-org/private", "lg-org/nope", "--trust-remote-code", "--format", "github", "--verbose"],
            ["audit", "lg-org/nope", "--trust-remote-code", "--format", "sarif"],
            ["env", "--format", "json"],
        ):
            code, out, err, _ = _run(hub.url, tmp_path, *args, token=TOKEN)
            outputs.append(out + err)
        sent = [a for a in hub.traffic.authorizations if a]
        assert sent and set(sent) == {f"Bearer {TOKEN}"}
        cdn = [
            line
            for line, auth in zip(hub.traffic.lines, hub.traffic.authorizations)
            if line.split()[1].startswith("/cdn/")
        ]
        assert all(
            auth is None
            for line, auth in zip(hub.traffic.lines, hub.traffic.authorizations)
            if line.split()[1].startswith("/cdn/")
        ), cdn
    written = [
        p.read_text(errors="replace")
        for p in tmp_path.rglob("*")
        if p.is_file()
        and p.suffix in (".json", ".md", ".sarif", ".xml", ".txt", ".py")
        and "hf" not in p.relative_to(tmp_path).parts[:1]
    ]
    assert not [text for text in outputs + written if TOKEN in text]


def test_what_is_worth_retrying_is_retried_within_bounds(np_repo, tmp_path):
    with HubServer({"lg-org/np": np_repo}) as hub:
        hub.fail["api:lg-org/np"] = [429, 503]  # the model info: too many requests (Retry-After: 1), then unavailable
        code, out, err, seconds = _run(
            hub.url, tmp_path, "scan", "lg-org/np", "--trust-remote-code", "--format", "json"
        )
        assert code == (1 if IS_V5 else 0) and _rows(out)[0]["scanned"] is True, err
        assert hub.traffic.requests[("api", "lg-org/np")] >= 3
        hub.fail["api:lg-org/np"] = [503] * 10  # down for good: bounded tries, then one line
        second = tmp_path / "second"
        second.mkdir()
        code, out, err, _ = _run(hub.url, second, "scan", "lg-org/np", "--trust-remote-code")
        assert code == 2 and "the Hub answered 503" in err, err


def test_a_stalled_header_read_ends_in_one_line_within_the_timeout(np_repo, tmp_path):
    with HubServer({"lg-org/np": np_repo}) as hub:
        hub.stall.add("model.safetensors")
        code, out, err, seconds = _run(
            hub.url, tmp_path, "scan", "lg-org/np", "--trust-remote-code", "--keys", "header", "--timeout", "60"
        )
    assert code == 2 and seconds < 60 and "Error: lg-org/np: the Hub stopped sending mid-transfer" in err, err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_connection_refused_is_unreachable_not_missing(tmp_path):
    code, out, err, _ = _run(f"http://127.0.0.1:{_free_port()}", tmp_path, "scan", "lg-org/np", "--trust-remote-code")
    assert code == 2 and "the Hugging Face Hub cannot be reached from here" in err and "no such model" not in err


def test_offline_touches_no_network(np_repo, tmp_path):
    with HubServer({"lg-org/np": np_repo}) as hub:
        code, out, err, seconds = _run(hub.url, tmp_path, "scan", "lg-org/np", "--trust-remote-code", offline=True)
        assert code == 2 and "HF_HUB_OFFLINE" in err and seconds < 5
        assert sum(hub.traffic.requests.values()) == 0
        _run(hub.url, tmp_path, "scan", "lg-org/np", "--trust-remote-code")  # fetched once
        hub.traffic.reset()
        code, out, err, _ = _run(
            hub.url, tmp_path, "scan", "lg-org/np", "--trust-remote-code", "--format", "json", offline=True
        )
        assert _rows(out)[0]["scanned"] is True and sum(hub.traffic.requests.values()) == 0


def test_from_takes_ids_with_revisions_comments_and_a_json_list(guarded, tmp_path):
    listing = tmp_path / "models.txt"
    listing.write_text("# what the engine tests\nlg-org/open  # a comment\nlg-org/open@main\n")
    as_json = tmp_path / "models.json"
    as_json.write_text(json.dumps(["lg-org/open", "lg-org/open@main"]))
    with HubServer(guarded) as hub:
        for source in (listing, as_json):
            code, out, err, _ = _run(
                hub.url, tmp_path, "scan", "--from", str(source), "--trust-remote-code", "--format", "json"
            )
            assert code == 0 and [r["model"] for r in _rows(out)] == ["lg-org/open", "lg-org/open@main"], err


def test_an_audit_downloads_the_weights_once_into_the_standard_cache(np_repo, tmp_path):
    """An audit of a Hub id loads it in full: the weights come once, into the standard HF cache, and the checkpoint
    checks read that snapshot; the second audit fetches no weight byte."""
    with HubServer({"lg-org/np": np_repo}) as hub:
        code, out, err, _ = _run(hub.url, tmp_path, "audit", "lg-org/np", "--trust-remote-code", "--format", "json")
        weights = np_repo.commits[np_repo.refs["main"]]["model.safetensors"].stat().st_size
        assert code == (1 if IS_V5 else 0), err
        assert hub.traffic.file_bytes(".safetensors") == weights  # the whole file, once
        document = json.loads(out)
        assert next(c for c in document["checks"] if c["check"] == "checkpoint_fidelity")["ran"] is True
        hub.traffic.reset()
        again, out, err, _ = _run(hub.url, tmp_path, "audit", "lg-org/np", "--trust-remote-code")
        assert again == code and hub.traffic.file_bytes(".safetensors") == 0, err


@pytest.mark.skipif(sys.platform != "linux", reason="a pseudo-terminal stands in for the user's terminal")
def test_a_hub_ids_download_shows_its_bar_on_a_terminal_and_not_in_a_log(np_repo, tmp_path):
    """stderr a terminal (a pseudo-terminal of 120 columns): the weights' download draws its bar; a log gets none."""
    import fcntl
    import pty
    import struct
    import termios

    with HubServer({"lg-org/np": np_repo}) as hub:
        leader, follower = pty.openpty()
        fcntl.ioctl(
            follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0)
        )  # a fresh pty has no width: tqdm draws nothing
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "terminal"),
            "HF_HUB_OFFLINE": "0",
            "LOADGUARD_CACHE": str(tmp_path / "lg"),
        }
        env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        process = subprocess.Popen(
            [sys.executable, "-m", "loadguard", "audit", "lg-org/np", "--trust-remote-code"],
            stdout=subprocess.DEVNULL,
            stderr=follower,
            env=env,
            cwd=tmp_path,
        )
        os.close(follower)
        shown = b""
        while True:  # read while it runs: a pty holds little
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        process.wait(timeout=300)
        os.close(leader)
        weights = np_repo.commits[np_repo.refs["main"]]["model.safetensors"].stat().st_size
        assert f"{weights / 1000:.1f}k/{weights / 1000:.1f}k".encode() in shown and b"100%" in shown, shown.decode(
            errors="replace"
        )[-2000:]
        (tmp_path / "log").mkdir()
        code, out, err, _ = _run(
            hub.url, tmp_path / "log", "audit", "lg-org/np", "--trust-remote-code"
        )  # stderr a pipe
        assert "100%" not in err and "B/s]" not in err, err


def test_an_index_naming_a_path_is_refused_and_writes_nothing_outside_the_cache(tmp_path, zoo_folder):
    """A hostile index (a shard named ../../x): refused in one line before any header is read or cached."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    shutil.copy(zoo_folder("clean") / "config.json", folder / "config.json")
    for name in ("configuration_lgtoy.py", "modeling_lgtoy.py"):
        shutil.copy(zoo_folder("clean") / name, folder / name)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "../../../escaped.safetensors"}})
    )
    with HubServer({"lg-org/hostile": Repo.from_folder(folder)}) as hub:
        code, out, err, _ = _run(
            hub.url, tmp_path, "scan", "lg-org/hostile", "--trust-remote-code", "--keys", "header"
        )
        assert code == 2 and "refused" in err and "../../../escaped.safetensors" in err, err
        assert hub.traffic.file_bytes(".safetensors") == 0
    assert not list(tmp_path.rglob("escaped.safetensors*"))
