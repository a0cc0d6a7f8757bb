"""Where answers come from: named layers (flags over the answers file over what genie infers),
merged the way copier's ``AnswersMap`` does, with a ``ChainMap``; the wizard then asks only
what no layer holds. Also the answers file: load a user's YAML, write the one a project keeps.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genie import __version__
from genie.errors import GenieError
from genie.i18n import _

if TYPE_CHECKING:
    from genie.spec.build import Spec

ANSWERS_FILE = ".genie.yml"  # what a project keeps of the answers genie used


@dataclass(frozen=True)
class Layers:
    """The answers of each source, highest priority first. Empty layers are fine."""

    flags: Mapping[str, Any] = field(default_factory=dict)  # given on the command line
    answers_file: Mapping[str, Any] = field(default_factory=dict)  # --answers FILE
    inferred: Mapping[str, Any] = field(default_factory=dict)  # e.g. the name from the directory

    @classmethod
    def gather(
        cls, flags: Mapping[str, Any], answers_file: Path | None, inferred: Mapping[str, Any]
    ) -> Layers:
        """The layers of a ``genie new`` run: flags not given (None) are left out."""
        given = {k: v for k, v in flags.items() if v is not None}
        loaded = load_answers(answers_file) if answers_file is not None else {}
        return cls(given, loaded, dict(inferred))

    def merged(self) -> ChainMap[str, Any]:
        """One mapping: each answer from the first layer that has it."""
        return ChainMap(dict(self.flags), dict(self.answers_file), dict(self.inferred))


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
    return _retire({str(k): v for k, v in data.items()})


def _retire(answers: dict[str, Any]) -> dict[str, Any]:
    """Drop what older genies wrote that no longer applies: the same project, read today
    (Kubernetes projects held the master's address, which the operator sets)."""
    if answers.get("scheduler") == "kubernetes":
        answers = {k: v for k, v in answers.items() if k not in ("master_addr", "master_port")}
    return answers


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
