"""``genie convert SCRIPT``: a single-device script -> DDP, then the 2-process check."""

from __future__ import annotations

from pathlib import Path

import click

from genie.cli.group import cli
from genie.cli.options import seconds_option
from genie.i18n import _


@cli.command(
    help=_("Turn a single-device training SCRIPT into a DDP script for torchrun, and prove it.")
)
@click.argument("script", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help=_("Converted script [SCRIPT_ddp.py].")
)
@click.option(
    "--nproc-per-node", type=click.IntRange(min=1), help=_("Processes per node [GPUs here, or 2].")
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help=_("Nodes to train on (2 or more also writes a multi-node launch script)."),
)
@click.option("--master-addr", help=_("Node 0's hostname or IP (several nodes)."))
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    default=29500,
    show_default=True,
    help=_("Node 0's rendezvous port (several nodes)."),
)
@click.option(
    "--check/--no-check",
    "run_check",
    default=True,
    help=_("Prove it: train on 2 processes under torchrun, parameters in sync at the end."),
)
@click.option("--check-args", default="", help=_('Arguments for the check run, e.g. "--epochs 1".'))
@click.option(
    "--check-dir",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help=_("Where the check runs (relative paths resolve there) [a new temporary directory]."),
)
@seconds_option("--timeout", 300.0, _("Seconds before the check is killed."))
@click.option("--force", is_flag=True, help=_("Replace existing output files (never SCRIPT)."))
@click.option("--yes", "-y", is_flag=True, help=_("Write without asking."))
@click.option(
    "--allow-todo",
    is_flag=True,
    help=_(
        "Write a conversion that leaves TODOs (places to finish by hand) instead of refusing it."
    ),
)
def convert(
    script: Path,
    output: Path | None,
    nproc_per_node: int | None,
    nodes: int,
    master_addr: str | None,
    master_port: int,
    run_check: bool,
    check_args: str,
    check_dir: Path | None,
    timeout: float,
    force: bool,
    yes: bool,
    allow_todo: bool,
) -> None:
    from genie.convert import command

    options = command.ConvertOptions(
        output=output,
        nproc_per_node=nproc_per_node,
        nodes=nodes,
        master_addr=master_addr,
        master_port=master_port,
        check_args=check_args if run_check else None,
        check_dir=check_dir,
        timeout=timeout,
        force=force,
        yes=yes,
        allow_todo=allow_todo,
    )
    command.run(script, options)
