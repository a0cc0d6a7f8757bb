"""``genie doctor``: the machine checks, as a table or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genie.cli.group import cli
from genie.cli.options import python_option
from genie.i18n import _


@cli.command(
    help=_(
        "Check this machine for what breaks distributed training, with a fix for each "
        "problem.\n\n"
        "Exit status: 0 when no check fails (warnings allowed), 1 when a check fails, 2 on bad "
        "input."
    )
)
@click.option(
    "--project",
    "project_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help=_("A genie project: its answers supply what the flags do not, and its pins are checked."),
)
@click.option("--master-addr", help=_("Node 0's address: it must resolve, and not to loopback."))
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    help=_("Rendezvous port (default: the project's, else 29500); must be free on the master."),
)
@click.option("--reach", is_flag=True, help=_("Also open a TCP connection to the master's port."))
@python_option(
    _("Interpreter whose torch and packages are checked (default: the one running genie).")
)
@click.option("--json", "as_json", is_flag=True, help=_("Print the checks as a JSON list."))
def doctor(project_dir: Path | None, **options: Any) -> None:
    from genie.doctor import command

    command.doctor(project_dir, **options)
