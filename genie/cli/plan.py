"""``genie plan [DIR] [-- TRAIN_ARGS]``."""

from __future__ import annotations

from pathlib import Path

import click

from genie.cli.group import cli
from genie.cli.options import python_option
from genie.i18n import _


@cli.command(
    context_settings={"ignore_unknown_options": True},
    help=_(
        "Predict each rank's peak GPU memory for a genie project (parameters, gradients, "
        "optimizer state, activations, temporaries, overhead) by tracing one training step "
        "on fake tensors at its world size, and say whether it fits; when it does not, what "
        "to change. Arguments after -- go to train.py (e.g. -- --model-name NAME --seq-len "
        "4096): the model is built from its config, no weights are read."
        "\n\nExit status: 0 when it fits (or no GPU memory is known), 1 when it does not, 2 "
        "on bad input."
    ),
)
@click.argument(
    "directory", required=False, default=".",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
)  # fmt: skip
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--gpu-memory",
    metavar="SIZE",
    help=_(
        "Each GPU's memory: 80GiB, 40GB, or a GPU such as H100 (default: the project's "
        "answer, else this machine's)."
    ),
)
@python_option(_("Interpreter with the project's requirements (default: the one running genie)."))
@click.option("--json", "as_json", is_flag=True, help=_("Print the figures as JSON, in bytes."))
def plan(
    directory: Path, train_args: tuple[str, ...], gpu_memory: str | None, python: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    from genie.plan import command

    command.plan(directory, gpu_memory=gpu_memory, python=python, as_json=as_json,
                 argv=list(train_args))  # fmt: skip
