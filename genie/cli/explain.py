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
        "\n\nExit status: 0 when something is explained (or the log says the run ended with "
        "exit 0), 1 when no known failure matched, 2 on bad input."
    )
)
@click.argument(
    "log", required=False, type=click.Path(path_type=Path, dir_okay=False, allow_dash=True)
)
@click.option(
    "--hang",
    "hang",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help=_(
        "Read a hung run instead: its --log-dir/hang folder (again for each node's): which "
        "collective which rank never entered or called differently, and where it was, a "
        "rank that ended, the network; of a running run asked with touch DIR/ask, a "
        "straggler or that it looks healthy."
    ),
)
def explain(log: Path | None, hang: tuple[Path, ...]) -> None:
    from genie.smoke import command

    if hang:
        command.explain_hang(list(hang))
    elif log is None:
        raise click.UsageError(_("pass a LOG, or --hang DIR"))
    else:
        command.explain(log)
