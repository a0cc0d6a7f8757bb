"""``genie smoke DIR``, and the smoke run that ends ``genie new``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from genie.cli.group import cli
from genie.cli.options import seconds_option
from genie.errors import GenieError, SmokeFailed
from genie.i18n import _
from genie.smoke import contract

if TYPE_CHECKING:
    from genie.detect import Machine
    from genie.smoke.plan import SmokeResult
    from genie.spec import Spec

TAIL_LINES = 15  # raw output lines shown after a failed smoke test's explanation


@cli.command(
    help=_("Smoke-test an existing genie project: a few real training steps under torchrun.")
)
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@seconds_option("--timeout", contract.SMOKE_TIMEOUT, _("Seconds before the run is killed."))
@click.option(
    "--python",
    "python",
    type=click.Path(exists=True, dir_okay=False),
    help=_("Interpreter with the project's requirements (default: the one running genie)."),
)
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
    from genie import detect
    from genie.spec.project import load_project
    from genie.upgrade import apply

    if apply.interrupted(directory):
        raise GenieError(_(apply.INTERRUPTED).format(d=directory))
    project = load_project(directory)
    run_smoke(
        project,
        directory.absolute(),
        detect.machine(),
        timeout,
        python=python or sys.executable,
        on_slurm=where == "slurm",
    )


def run_smoke(
    project: Spec,
    target: Path,
    machine: Machine,
    timeout: float,
    *,
    python: str = sys.executable,
    asked: bool = True,
    on_slurm: bool = False,
) -> None:
    """Run the smoke test and print its verdict. When this machine cannot run it: an error if
    the user asked for it (``genie smoke``), a warning after ``genie new`` (the project is
    written and fine)."""
    from genie import ui
    from genie.smoke import runner
    from genie.smoke.plan import RunOptions

    options = RunOptions(machine, timeout, ui.stream, python)
    if on_slurm:
        ui.info(_("\nSmoke test: launch/slurm.sbatch --smoke, submitted with sbatch --wait..."))
        report(runner.run(project, target, options, on_slurm=True), target)
        return
    why = runner.unavailable(project, machine)
    if why is not None:
        if asked:
            raise GenieError(_("cannot smoke-test here: ") + why)
        ui.warn(_("smoke test not run: ") + why)
        return
    runner.require_packages(project, python, target)  # before announcing a run
    ui.info(_("\nSmoke test: a few real training steps under torchrun..."))
    report(runner.run(project, target, options), target)


def report(result: SmokeResult, target: Path) -> None:
    """The verdict; for a failed run, its likely cause and last lines, then exit 1."""
    from genie import ui
    from genie.smoke import signatures

    ui.verdict(result)
    if not result.passed:
        found = signatures.explain(
            result.output, result.returncode, result.timed_out, project=target
        )
        ui.explain(found, result.output.splitlines()[-TAIL_LINES:], str(target))
        raise SmokeFailed(_("smoke test failed: ") + "; ".join(result.problems))
