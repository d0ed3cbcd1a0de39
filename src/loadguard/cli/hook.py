"""``loadguard hook scan|audit [ARGS] FILES...``: the pre-commit hooks' entry (``.pre-commit-hooks.yaml``). pre-commit
passes the changed files; each is taken to its model folder (the nearest folder above it, up to the repository's
root, that holds a config.json), and ``loadguard scan|audit ARGS FOLDERS`` runs once over those folders."""

from __future__ import annotations

from pathlib import Path

import click

from . import cli
from ._common import ExitCode, note


def model_folders(files: list[str], root: Path) -> list[str]:
    """The model folder of each file (the nearest folder at or below ``root`` holding config.json), each once, in the
    order the files came; files outside ``root`` or in no model folder are skipped."""
    root = root.resolve()
    found: dict[str, None] = {}
    for file in files:
        folder = Path(file).resolve().parent
        while folder == root or root in folder.parents:
            if (folder / "config.json").is_file():
                found[str(Path(folder).relative_to(root)) or "."] = None
                break
            folder = folder.parent
    return list(found)


def split_files(words: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(loadguard's arguments, the files pre-commit appended): the files are the trailing words naming existing files."""
    end = len(words)
    while end and Path(words[end - 1]).is_file():
        end -= 1
    return list(words[:end]), list(words[end:])


@click.command(hidden=True, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("command", type=click.Choice(["scan", "audit"]))
@click.argument("words", nargs=-1, type=click.UNPROCESSED)
def hook(command: str, words: tuple[str, ...]) -> int:
    """pre-commit's entry: COMMAND (scan or audit) over the model folders of the changed FILES, with ARGS."""

    arguments, files = split_files(words)
    folders = model_folders(files, Path.cwd())
    if not folders:
        note("loadguard: no changed file belongs to a model folder (a folder with config.json): nothing to check")
        return ExitCode.CLEAN
    with click.Context(cli) as ctx:
        run = cli.get_command(ctx, command)
    if command == "scan":  # one fleet
        return run.main(args=[*folders, *arguments], prog_name=f"loadguard {command}", standalone_mode=False)
    codes = [
        run.main(args=[folder, *arguments], prog_name=f"loadguard {command}", standalone_mode=False)
        for folder in folders
    ]
    if all(code == ExitCode.COULD_NOT_RUN for code in codes):
        return ExitCode.COULD_NOT_RUN
    if any(code == ExitCode.COULD_NOT_RUN for code in codes):
        return ExitCode.PARTIAL
    return max(codes)


__all__ = ["hook", "model_folders", "split_files"]
