"""``genie new``'s doing and printing: answers (flags over answers file over wizard) -> Spec
-> files on disk -> the files and launch commands shown. The smoke test that follows is the
smoke stage's (:func:`genie.smoke.command.after_writing`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.detect import Machine
from genie.errors import Declined, GenieError
from genie.i18n import _
from genie.spec import Spec


@dataclass(frozen=True)
class Written:
    """A project genie has just written."""

    spec: Spec
    target: Path  # absolute
    machine: Machine


def new(
    directory: Path, flags: Mapping[str, Any], *, answers_file: Path | None, ask: bool, force: bool
) -> Written:
    """Write the project the answers describe into ``directory``, asking for what is missing
    when ``ask`` (else taking the defaults), and show its files and launch commands."""
    from genie import detect, ui
    from genie.generate import catalogue, engine, launch, write
    from genie.spec.answers import Layers

    target = directory.absolute()
    write.check_target(target, force)  # before any question is asked
    raw = Layers.gather(flags, answers_file, inferred={"name": target.name}).merged()
    machine = detect.machine()
    project = _spec(raw, machine, ask=ask)
    write.write_project(target, engine.render(project), force=force)
    ui.files(str(directory), catalogue.project_files(project))
    ui.commands(str(directory), launch.commands(project))
    return Written(project, target, machine)


def _spec(raw: Mapping[str, Any], machine: Machine, ask: bool) -> Spec:
    """The Spec from the answers given, the wizard asking for the rest (or, without ``ask``,
    the defaults); the summary shown either way."""
    from genie import ui
    from genie.generate.fit import Verdicts
    from genie.spec import build_spec
    from genie.wizard import Offer

    verdicts = Verdicts()

    def show(spec: Spec) -> Offer | None:
        ui.summary(spec, machine)
        return verdicts.show(spec)  # when the GPUs' memory is known: will it fit?

    if not ask:
        project = build_spec(raw, machine)
        show(project)
        return project
    if not sys.stdin.isatty():
        raise GenieError(_("no terminal to ask questions in; pass --yes (and flags or --answers)"))
    from genie import wizard

    chosen = wizard.run(raw, machine, show=show)
    if chosen is None:
        raise Declined(_("Cancelled: nothing written."))
    return chosen
