"""The Python environment itself as the cause of a failure: an installed package that cannot be imported (a
torchvision built for another torch, a stand-in on ``PYTHONPATH``) breaks every ``import`` of transformers' classes
that reaches it, and transformers reports only ``Could not import module 'PreTrainedModel'``. This finds the package
the chain of exceptions ends in, its version, where it was imported from and which torch it was built for."""

from __future__ import annotations

import os
import re
import shlex
import sys
import traceback
from importlib import metadata
from pathlib import Path

from ..errors import BrokenEnvironmentError, chain_of

# the model's own code (a failure there is the model's, said elsewhere) and loadguard's
_NOT_THE_ENVIRONMENT = frozenset({"transformers_modules", "loadguard"})
_LAZY_IMPORT = re.compile(r"Could not import module '")  # transformers' lazy module, around the real failure
_TORCH_REQUIREMENT = re.compile(r"^torch\s*(?:\(\s*)?([<>=!~][^;)]*)")


def _an_import_statement(frames) -> bool:
    """Whether the innermost failure came out of an ``import`` statement (the module imported raised, or is missing)."""
    line = (frames[-1].line or "").strip() if frames else ""
    return line.startswith(("import ", "from "))


def _top_level(filename: str) -> tuple[str, str] | None:
    """(the top-level module a source file belongs to, the ``sys.path`` entry it was found under)."""
    path = os.path.abspath(filename)
    for entry in sorted({os.path.abspath(p or os.curdir) for p in sys.path}, key=len, reverse=True):
        if path.startswith(entry.rstrip(os.sep) + os.sep):
            first = path[len(entry.rstrip(os.sep)) + 1 :].split(os.sep)[0]
            return first[:-3] if first.endswith(".py") else first, entry
    return None


def _distribution(top: str) -> str | None:
    try:
        names = metadata.packages_distributions().get(top) or ()
    except Exception:  # a broken metadata folder elsewhere: the module's own name will do
        names = ()
    return names[0] if names else None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_wanted(distribution: str) -> str | None:
    """The torch version a distribution declares it needs (``==2.9.1``), None when it declares none."""
    try:
        requires = metadata.requires(distribution) or ()
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        found = _TORCH_REQUIREMENT.match(line.strip())
        if found and "extra ==" not in line:
            return found.group(1).strip()
    return None


def import_failure(error: BaseException) -> BrokenEnvironmentError | None:
    """When ``error`` is an import of the environment's packages that failed (transformers could not import a module, or
    an ``import`` statement raised) and its chain ends in an installed package other than the model's own code: one error
    naming that package, its version, where it was imported from, the torch it wants and the one installed; None
    otherwise."""
    chain = chain_of(error)
    innermost = chain[-1]
    frames = traceback.extract_tb(innermost.__traceback__)
    if not (any(_LAZY_IMPORT.match(str(e)) for e in chain) or _an_import_statement(frames)):
        return None  # an ImportError a library raises on purpose ("needs X: pip install X") says what to do itself
    found = None
    for frame in reversed(frames):  # the deepest frame that belongs to a module of the environment
        if "transformers_modules" in Path(frame.filename).parts:
            return None  # the model's own code raised: its failure, said where its load is translated
        found = _top_level(frame.filename)
        if found is not None:
            break
    if found is None and isinstance(innermost, ImportError) and innermost.name:
        found = (innermost.name.split(".")[0], "")
    if found is None or found[0] in _NOT_THE_ENVIRONMENT:
        return None
    top, entry = found
    distribution = _distribution(top) or top
    version = _version(distribution)
    what = f"{distribution} {version}" if version else distribution
    pythonpath = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    where = f" from {entry}" + (" (on PYTHONPATH)" if entry in pythonpath else "") if entry else ""
    first = str(innermost).strip().splitlines()
    cause = f"{type(innermost).__name__}: {first[0]}" if first else type(innermost).__name__
    wanted, torch = torch_wanted(distribution), _version("torch")
    built = ""
    if wanted and torch and distribution != "torch":
        built = f"; {what} was built for torch{wanted}, and this environment has torch {torch}"
    message = f"this Python environment cannot import transformers' own classes: importing {what}{where} failed ({cause}){built}"
    if built:
        hint = f"install the {distribution} built for torch {torch}, or remove {distribution} from this environment"
    else:
        hint = f"reinstall {distribution} so that it imports, or remove it from this environment"
    if " (on PYTHONPATH)" in where:
        hint += f" (take {entry} off PYTHONPATH)"
    return BrokenEnvironmentError(message, hint + f"; check with: {shlex.join(['python', '-c', f'import {top}'])}")


__all__ = ["import_failure", "torch_wanted"]
