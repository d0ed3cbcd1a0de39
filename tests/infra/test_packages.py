"""An environment that cannot import transformers' own classes is named as such: the package, where it came from, the
torch it was built for (issue 56). Never "unexpected ..., report it"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadguard._infra import import_failure
from loadguard.errors import BrokenEnvironmentError


def _stand_in(folder: Path) -> Path:
    """A torchvision on its own folder, built for another torch: importing it raises, as a real mismatched build does."""
    package = folder / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        '__version__ = "0.24.1"\nraise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    info = folder / "torchvision-0.24.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.24.1\nRequires-Dist: numpy\nRequires-Dist: torch==2.9.1\n"
    )
    (info / "top_level.txt").write_text("torchvision\n")
    (info / "RECORD").write_text("")
    return folder


def test_a_broken_torchvision_on_pythonpath_is_named_with_the_torch_it_wants(tmp_path, zoo_folder):
    folder = zoo_folder("np_buffer")
    stand_in = _stand_in(tmp_path / "extra")
    env = {**os.environ, "PYTHONPATH": str(stand_in)}
    env.pop("LOADGUARD_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "loadguard", "scan", str(folder), "--trust-remote-code"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-2] == (
        f"Error: this Python environment cannot import transformers' own classes: importing torchvision 0.24.1 from "
        f"{stand_in} (on PYTHONPATH) failed (RuntimeError: operator torchvision::nms does not exist); torchvision 0.24.1 "
        f"was built for torch==2.9.1, and this environment has torch {_torch_version()}"
    )
    assert lines[-1].startswith(f"Hint: install the torchvision built for torch {_torch_version()}")
    assert f"take {stand_in} off PYTHONPATH" in lines[-1] and "check with: python -c 'import torchvision'" in lines[-1]
    assert "report it" not in done.stderr and "Traceback" not in done.stderr


def _torch_version() -> str:
    from importlib import metadata

    return metadata.version("torch")


def _raised(code: str, filename: str) -> BaseException:
    try:
        exec(compile(code, filename, "exec"), {})
    except BaseException as error:  # noqa: BLE001 - the error is the value under test
        return error
    raise AssertionError("the code did not raise")


def test_a_failure_of_the_models_own_code_is_not_the_environments():
    """The chain ends in the model's remote code (transformers_modules): that is the model's failure, said elsewhere."""
    inner = _raised("raise NameError(\"name 'List' is not defined\")", "/x/transformers_modules/m/modeling_m.py")
    outer = ModuleNotFoundError("Could not import module 'LgModel'")
    outer.__cause__ = inner
    assert import_failure(outer) is None
    assert import_failure(inner) is None  # and an error with no import in its chain is nobody's environment


def test_an_import_that_fails_in_an_installed_package_names_it(tmp_path, monkeypatch):
    _stand_in(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    try:
        import torchvision  # noqa: F401
    except RuntimeError as inner:
        outer = ModuleNotFoundError("Could not import module 'PreTrainedModel'")
        outer.__cause__ = inner
        found = import_failure(outer)
    else:
        raise AssertionError("the stand-in imported")
    assert isinstance(found, BrokenEnvironmentError)
    assert "importing torchvision 0.24.1 from " + str(tmp_path) in found.message
    assert "built for torch==2.9.1" in found.message
