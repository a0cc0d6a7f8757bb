"""``genie explain LOG``: the known failure signatures in any torchrun or SLURM log."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from genie.cli.group import cli
from genie.errors import GenieError
from genie.i18n import _

NOTHING_MATCHED = 1  # exit status when no known signature is in the log


@cli.command(
    help=_(
        "Explain a failed run from its log: a torchrun, SLURM or genie smoke output file (or - "
        "for standard input), with the likely cause and the fix of every known failure in it."
        "\n\nExit status: 0 when something is explained, 1 when no known failure matched, 2 on "
        "bad input."
    )
)
@click.argument("log", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True))
def explain(log: Path) -> None:
    from genie import ui
    from genie.smoke import signatures

    text = _read(log)
    # a faulthandler dump in the log: the run was stopped while a rank hung
    hung = "(most recent call first)" in text
    found = signatures.explain(text, returncode=1, timed_out=hung)
    ui.explain(found, [], str(log), footer=False)
    if not found:
        sys.exit(NOTHING_MATCHED)


def _read(log: Path) -> str:
    if str(log) == "-":
        return sys.stdin.read()
    try:
        return log.read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        raise GenieError(
            _("cannot read {f}: {why}").format(f=log, why=err.strerror or err)
        ) from None
