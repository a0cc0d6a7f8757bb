"""``genie explain LOG``: the known failure signatures in any torchrun or SLURM log."""

from __future__ import annotations

from pathlib import Path

import click

from genie.cli.group import cli
from genie.i18n import _


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
    from genie.smoke import command

    command.explain(log)
