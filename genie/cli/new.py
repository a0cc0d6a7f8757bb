"""``genie new DIR``: answers (flags over answers file over wizard) -> Spec -> files ->
launch commands -> smoke test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genie.cli.group import cli
from genie.cli.options import field_options, smoke_after_options
from genie.i18n import _


@cli.command(
    help=_(
        "Generate a distributed training project in DIRECTORY, then smoke-test it.\n\n"
        "Without --yes, genie asks the essentials (nodes, GPUs, PyTorch, task, framework), "
        "shows a summary, then offers to generate, change a setting or customize the training "
        "settings. Cancelling there writes nothing and exits 1; Ctrl-C exits 130.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  genie new ../demo                  # a few questions, then the summary\n"
        "  genie new ../demo --yes            # no questions: every default\n"
        "  genie new ../big --yes --nodes 2 --master-addr 10.0.0.5 --gpus-per-node 8"
    )
)
@click.argument("directory", type=click.Path(path_type=Path))
@field_options
@click.option(
    "--answers",
    "answers_file",
    type=click.Path(path_type=Path),
    help=_("YAML answers file; flags override it."),
)
@click.option(
    "--yes", "-y", is_flag=True, help=_("Ask nothing: take defaults for every missing answer.")
)
@click.option(
    "--force",
    is_flag=True,
    help=_("Write into a non-empty directory (never replaces files genie did not write)."),
)
@smoke_after_options(_("Smoke-test the project after generating it."))
def new(
    directory: Path,
    answers_file: Path | None,
    yes: bool,
    force: bool,
    run_smoke_after: bool,
    smoke_timeout: float,
    **flags: Any,
) -> None:
    from genie.generate import command
    from genie.smoke.command import after_writing

    written = command.new(directory, flags, answers_file=answers_file, ask=not yes, force=force)
    if run_smoke_after:
        after_writing(
            written.spec, written.target, written.machine, smoke_timeout, shown=str(directory)
        )
