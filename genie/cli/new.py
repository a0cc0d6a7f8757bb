"""``genie new DIR``: answers (flags over answers file over wizard) -> Spec -> files ->
launch commands -> smoke test."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from genie.cli.group import cli
from genie.cli.options import field_options, smoke_after_options
from genie.cli.smoke import run_smoke
from genie.errors import Aborted, GenieError
from genie.i18n import _

if TYPE_CHECKING:
    from collections.abc import Mapping

    from genie.detect import Machine
    from genie.spec import Spec

DECLINED = 1  # exit status when the user cancels at the summary (Ctrl-C is 130)


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
    from genie import detect, ui
    from genie.generate import catalogue, engine, launch, write
    from genie.spec.answers import Layers

    target = directory.absolute()
    write.check_target(target, force)  # before any question is asked
    raw = Layers.gather(flags, answers_file, inferred={"name": target.name}).merged()
    machine = detect.machine()
    project = _spec(raw, machine, ask=not yes)
    write.write_project(target, engine.render(project), force=force)
    ui.files(str(directory), catalogue.project_files(project))
    ui.commands(str(directory), launch.commands(project))
    if run_smoke_after:
        try:
            run_smoke(project, target, machine, smoke_timeout, asked=False)
        except KeyboardInterrupt:
            raise Aborted(
                _(
                    "smoke test interrupted; the project was written to {d}: "
                    "run `genie smoke {d}` to test it"
                ).format(d=directory)
            ) from None


def _spec(raw: Mapping[str, Any], machine: Machine, ask: bool) -> Spec:
    """The Spec from the answers given, the wizard asking for the rest (or, with --yes, the
    defaults); the summary shown either way. Cancelling exits with DECLINED."""
    from genie import ui
    from genie.spec import build_spec

    if not ask:
        project = build_spec(raw, machine)
        ui.summary(project, machine)
        return project
    if not sys.stdin.isatty():
        raise GenieError(_("no terminal to ask questions in; pass --yes (and flags or --answers)"))
    from genie import wizard

    chosen = wizard.run(raw, machine, show=lambda s: ui.summary(s, machine))
    if chosen is None:
        ui.info(_("Cancelled: nothing written."))
        sys.exit(DECLINED)
    return chosen
