"""An existing genie project, read back: its ``.genie.yml`` into the Spec it was made from."""

from __future__ import annotations

from pathlib import Path

from genie import detect
from genie.errors import GenieError
from genie.i18n import _
from genie.spec.answers import ANSWERS_FILE, load_answers
from genie.spec.build import Spec, build_spec


def load_project(directory: Path) -> Spec:
    """The Spec of the genie project in ``directory``; a GenieError when it is not one."""
    answers = directory / ANSWERS_FILE
    if not answers.is_file():
        raise GenieError(_("{f} not found: is {d} a genie project?").format(f=answers, d=directory))
    return build_spec(load_answers(answers), detect.machine())
