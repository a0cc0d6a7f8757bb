"""Will it fit, in genie new's summary: the project rendered into a scratch folder, one
training step traced as ``genie plan`` traces it, the verdict printed; the cheapest change
that fits is what the wizard offers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from genie import scratch, ui
from genie.errors import GenieError
from genie.i18n import _
from genie.spec import Spec
from genie.spec.gpus import memory_bytes
from genie.wizard import Offer

if TYPE_CHECKING:
    from genie.plan.command import Plan


class Verdicts:
    """The verdict of each project shown, traced once and printed every time it is shown
    (the wizard shows a summary again after every change)."""

    def __init__(self) -> None:
        # a plan, why it was not planned, or None where there is nothing to plan
        self.plans: dict[Spec, Plan | str | None] = {}

    def show(self, spec: Spec) -> Offer | None:
        """Print whether ``spec``'s model fits its GPUs; return the change that makes it
        fit (a menu line and its answers), or None."""
        from genie.plan import command

        if spec not in self.plans:
            self.plans[spec] = _traced(spec)
        plan = self.plans[spec]
        if isinstance(plan, str):
            _skipped(plan)
        if plan is None or isinstance(plan, str):
            return None
        line = _("Peak memory per rank (genie plan): {t}").format(t=command.gib(plan.figures.total))
        ui.console().print("\n" + line, markup=False, style="bold")
        command.verdict(plan)
        found = command.first_fit(plan) if plan.fits is False else None
        if found is None:
            return None
        what, figures = found
        offer = _("Make it fit: {w} ({t} per rank)").format(w=what, t=command.gib(figures.total))
        return offer, command.setup_answers(figures.setup)


def _traced(spec: Spec) -> Plan | str | None:
    from genie.plan import command

    if spec.gpu_memory is None or spec.strategy is None:  # no size, or DataParallel
        return None
    if importlib.util.find_spec("torch") is None:
        return _("torch is not installed beside genie")
    memory = memory_bytes(spec.gpu_memory)
    try:
        with ui.console().status(_("Will it fit? Tracing one training step…")):
            with scratch.directory("plan") as folder:
                _write(Path(folder), spec)
                return command.make_plan(spec, Path(folder), memory, sys.executable, [])
    except GenieError as error:
        return str(error)


def _write(folder: Path, spec: Spec) -> None:
    from genie.generate import engine

    for name, data in engine.render(spec).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _skipped(why: str) -> None:
    line = _("Will it fit: not planned here ({w}); after generating, run genie plan DIR "
             "--python PATH with the project's environment").format(w=why)  # fmt: skip
    ui.console().print("\n" + line, markup=False, style="dim", soft_wrap=True)
