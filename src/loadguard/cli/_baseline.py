"""``--baseline FILE`` / ``--write-baseline`` for the commands that check models (:mod:`loadguard.formats.baseline`)."""

from __future__ import annotations

import click

from ..errors import InvalidOptionError
from ._common import note


def baseline_options(command):
    """``--baseline FILE`` / ``--write-baseline``: known findings (by fingerprint) kept out of the report and the exit
    code; new and fixed ones are reported."""
    command = click.option(
        "--write-baseline",
        is_flag=True,
        help="Write this run's findings to --baseline FILE (exit 0), to adopt loadguard on a large model list.",
    )(command)
    return click.option(
        "--baseline",
        "baseline_file",
        default=None,
        metavar="FILE",
        type=click.Path(dir_okay=False, resolve_path=True),
        help="Findings known by fingerprint: not reported and not failing; new and fixed ones are.",
    )(command)


def apply_baseline(rows, baseline_file: str | None, write_baseline: bool):
    """``rows`` (:class:`loadguard.formats.Row`) less what the baseline knows, or None after ``--write-baseline`` wrote
    it (the command then ends, exit 0)."""
    from ..formats import baseline

    if write_baseline:
        if not baseline_file:
            raise InvalidOptionError(
                "--write-baseline needs --baseline FILE: where to write it", "add --baseline loadguard-baseline.json"
            )
        count = baseline.write(rows, baseline_file)
        note(f"wrote {count} finding(s) to the baseline {baseline_file}")
        return None
    if not baseline_file:
        return rows
    kept, known, fixed = baseline.apply(rows, baseline.read(baseline_file))
    note(baseline.report(known, fixed, baseline_file))
    return kept
