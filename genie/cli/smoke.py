"""``genie smoke DIR``."""

from __future__ import annotations

from pathlib import Path

import click

from genie import contract
from genie.cli.group import cli
from genie.cli.options import python_option, seconds_option
from genie.i18n import _


@cli.command(
    help=_("Smoke-test an existing genie project: a few real training steps under torchrun.")
)
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@seconds_option("--timeout", contract.SMOKE_TIMEOUT, _("Seconds before the run is killed."))
@python_option(_("Interpreter with the project's requirements (default: the one running genie)."))
@click.option(
    "--on",
    "where",
    type=click.Choice(["here", "slurm"]),
    default="here",
    show_default=True,
    help=_(
        "here: this machine (several nodes are simulated); slurm: submit "
        "launch/slurm.sbatch --smoke with sbatch --wait and judge the job's output."
    ),
)
def smoke(directory: Path, timeout: float, python: str | None, where: str) -> None:
    from genie.smoke import command

    command.smoke(directory, timeout=timeout, python=python, on_slurm=where == "slurm")
