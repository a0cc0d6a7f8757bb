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
    except UnicodeDecodeError:
        raise GenieError(
            _("answers file {path} is not UTF-8 text; it must be YAML (answer: value)").format(
                path=path
            )
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
        raise GenieError(
            _("answers file {path} is empty; it must hold answer: value lines").format(path=path)
        )
    if not isinstance(data, dict):
        raise GenieError(
            _("answers file {path} must be a mapping of answer: value").format(path=path)
        )
    _check_version(path, data.get("genie_version"))
    return {str(k): v for k, v in data.items()}


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def _check_version(path: Path, written_by: Any) -> None:
    """Refuse an answers file from a newer genie: it may hold answers this one misreads."""
    if written_by is None:
        return
    theirs = _version_tuple(str(written_by))
    if theirs is None:
        raise GenieError(
            _("answers file {path}: genie_version {v!r} is not a version such as {ours}").format(
                path=path, v=written_by, ours=__version__
            )
        )
    ours = _version_tuple(__version__.split("+")[0]) or ()
    if theirs[:2] > ours[:2]:
        raise GenieError(
            _(
                "answers file {path} was written by genie {v}, newer than this genie {ours}; "
                "upgrade genie (pip install -U genie) to read it"
            ).format(path=path, v=written_by, ours=__version__)
        )


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
