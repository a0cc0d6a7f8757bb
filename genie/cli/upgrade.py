"""``genie upgrade DIR``: today's templates merged into an edited project, then its smoke
test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genie.cli.group import cli
from genie.cli.options import retarget_options, smoke_after_options
from genie.i18n import _


@cli.command(
    help=_(
        "Bring the genie project in DIRECTORY to this genie's templates, keeping your edits; "
        "flags re-target it (--torch, --nodes, --scheduler, --precision, ...).\n\n"
        "Files you never changed are replaced, files you changed are merged three ways against "
        "the files as genie wrote them (.genie/base.tar.gz); a conflict is left in the file "
        "between <<<<<<< yours and >>>>>>> genie, listed with its line, and the exit status is "
        "1. Then the project is smoke-tested.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  genie upgrade ../demo --dry-run      # the plan and the diff; nothing written\n"
        "  genie upgrade ../demo --torch 2.14   # move the project to torch 2.14"
    )
)
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@retarget_options
@click.option("--dry-run", is_flag=True, help=_("Print the plan and the diff; write nothing."))
@click.option("--force", is_flag=True, help=_("Upgrade even though git shows uncommitted changes."))
@smoke_after_options(_("Smoke-test the project after a merge without conflicts."))
def upgrade(
    directory: Path,
    dry_run: bool,
    force: bool,
    run_smoke_after: bool,
    smoke_timeout: float,
    **flags: Any,
) -> None:
    from genie.smoke.command import after_writing
    from genie.upgrade import command

    upgraded = command.upgrade(directory, flags, dry_run=dry_run, force=force)
    if upgraded is not None and run_smoke_after:
        spec, machine = upgraded
        after_writing(spec, directory.absolute(), machine, smoke_timeout, shown=str(directory))
