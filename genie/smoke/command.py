"""``genie smoke`` and ``genie explain``'s doing and printing, and the smoke test that ends
``genie new`` and ``genie upgrade``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from genie.errors import Aborted, GenieError, NothingMatched, SmokeFailed
from genie.i18n import _

if TYPE_CHECKING:
    from genie.detect import Machine
    from genie.smoke.plan import SmokeResult
    from genie.spec import Spec

TAIL_LINES = 15  # raw output lines shown after a failed smoke test's explanation


def smoke(directory: Path, *, timeout: float, python: str | None, on_slurm: bool) -> None:
    """``genie smoke DIR``: the project's smoke test, here or submitted to SLURM."""
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
        on_slurm=on_slurm,
    )


def after_writing(
    project: Spec, target: Path, machine: Machine, timeout: float, *, shown: str
) -> None:
    """The smoke test after ``genie new`` or ``genie upgrade`` wrote the project (``shown``:
    its directory as the user typed it): where this machine cannot run it, a warning (the
    project is written and fine); Ctrl-C says how to run it later."""
    try:
        run_smoke(project, target, machine, timeout, asked=False)
    except KeyboardInterrupt:
        raise Aborted(
            _(
                "smoke test interrupted; the project was written to {d}: "
                "run `genie smoke {d}` to test it"
            ).format(d=shown)
        ) from None


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
    """The verdict; for a passed run, why what looked bad in its output did no harm; for a
    failed run, its likely cause and last lines, then SmokeFailed."""
    from genie import ui
    from genie.smoke import signatures

    ui.verdict(result)
    if result.passed:
        _harmless(signatures.harmless(result.output))
        return
    found = signatures.explain(result.output, result.returncode, result.timed_out, project=target)
    ui.explain(found, result.output.splitlines()[-TAIL_LINES:], str(target))
    raise SmokeFailed(_("smoke test failed: ") + "; ".join(result.problems))


def explain(log: Path) -> None:
    """``genie explain LOG``: the known failures in a log (``-``: standard input), with their
    fixes; NothingMatched when there is none. A log whose launch script says torchrun
    exited 0 gets no diagnosis."""
    from genie import ui
    from genie.smoke import signatures

    text = _read(log)
    end = signatures.ended(text)
    if end is not None and end[1] == 0:  # nothing failed: say so, not what merely looks bad
        line = _("The run ended normally (torchrun exited 0 on {h}): nothing to explain.")
        ui.console().print("\n" + line.format(h=end[0]), markup=False, soft_wrap=True)
        _harmless(signatures.harmless(text))
        return
    # a faulthandler dump in the log: the run was stopped while a rank hung
    hung = "(most recent call first)" in text
    found = signatures.explain(text, returncode=1, timed_out=hung)
    ui.explain(found, [], str(log), footer=False)
    if not found:
        raise NothingMatched("")


def _harmless(notes: list[str]) -> None:
    from genie import ui

    for note in notes:
        ui.console().print("  " + note, markup=False, style="dim", soft_wrap=True)


def explain_hang(folders: list[Path]) -> None:
    """``genie explain --hang DIR...``: the verdict first, then its evidence and fix;
    NothingMatched when the records show no cause."""
    from genie import ui
    from genie.smoke import autopsy, fr_torch

    ranks = autopsy.load(folders)
    verdict, lines = autopsy.report(
        ranks, lambda v: fr_torch.opinion(ranks, v.kind, v.seq, v.culprits)
    )
    for line in lines:
        ui.console().print(line, markup=False, highlight=False, soft_wrap=True)
    if verdict.kind == "unknown":
        raise NothingMatched("")


def _read(log: Path) -> str:
    if str(log) == "-":
        return sys.stdin.read()
    try:
        return log.read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        raise GenieError(
            _("cannot read {f}: {why}").format(f=log, why=err.strerror or err)
        ) from None
