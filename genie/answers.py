"""The answers file: load a user's YAML answers, write the one genie keeps in a project."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from genie import __version__
from genie.errors import GenieError
from genie.i18n import _

if TYPE_CHECKING:
    from genie.spec import Spec


def load_answers(path: Path) -> dict[str, Any]:
    """Read a YAML answers file into a raw mapping (validated later, with everything else)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise GenieError(
            _("cannot read answers file {path}: {why}").format(path=path, why=err.strerror)
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise GenieError(
            _("answers file {path} is not valid YAML{line}; fix it or regenerate it").format(
                path=path, line=line
            )
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GenieError(
            _("answers file {path} must be a mapping of answer: value").format(path=path)
        )
    return {str(k): v for k, v in data.items()}


def dump_answers(spec: Spec) -> str:
    """The answers file genie writes into a project; loading it reproduces the project."""
    lines = [
        "# Answers genie used for this project. Reproduce it with:",
        "#   genie new DIR --answers .genie.yml --yes",
        f"genie_version: {__version__}",
    ]
    for key, value in spec.answers().items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)
        elif isinstance(value, int):
            text = str(value)
        else:
            text = f'"{value}"'  # validated values never contain quotes or backslashes
        lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n"
