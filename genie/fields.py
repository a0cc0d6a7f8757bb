"""The field machinery: one declared answer with its type, choices, range and checks.

:meth:`Field.parse` judges a flag string, a YAML value or a wizard reply the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from genie.detect import Machine
from genie.errors import SpecError
from genie.i18n import _

Answers = Mapping[str, Any]

_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}


def _always(answers: Answers) -> bool:
    return True


@dataclass(frozen=True)
class Field:
    """One answer: its type, choices, default, help and validation, declared once."""

    name: str
    kind: type  # int, float, str or bool
    question: str  # what the wizard asks
    help: str  # one line for --help and the wizard's hint
    default: Callable[[Answers, Machine], Any]
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], str | None] | None = None  # returns what is accepted, or None
    applies: Callable[[Answers], bool] = _always
    normalize: Callable[[str], str] | None = None
    choice_help: dict[str, str] | None = None  # one line per choice, for the wizard
    warnings: dict[str, str] | None = None  # printed when that choice is made
    marks: dict[str, str] | None = None  # shown next to a choice wherever it is listed
    not_applicable: str = _("only applies to multi-node projects (--nodes 2 or more)")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        return f"{self.name} ({self.flag})"

    def accepted(self) -> str:
        """Human description of the accepted values."""
        if self.choices:
            return _("one of: ") + ", ".join(self.titles())
        if self.kind is bool:
            return _("true or false")
        kind = {int: _("a whole number"), float: _("a number"), str: _("text")}[self.kind]
        low, high = _number(self.minimum), _number(self.maximum)
        if low and high:
            return _("{kind} between {low} and {high}").format(kind=kind, low=low, high=high)
        if low:
            return f"{kind} >= {low}"
        return kind

    def titles(self, choices: tuple[str, ...] | None = None) -> list[str]:
        """The choices as listed: each with its mark, e.g. "2.15 (not verified by genie yet)"."""
        marks = self.marks or {}
        return [f"{c} ({marks[c]})" if c in marks else c for c in choices or self.choices or ()]

    def parse(self, raw: Any) -> Any:
        """Turn a flag string, YAML value or wizard reply into a valid value, or raise."""
        value = self._convert(raw)
        if self.choices and value not in self.choices:
            raise SpecError(self.label, raw, self.accepted())
        if self.minimum is not None and value < self.minimum:
            raise SpecError(self.label, raw, self.accepted())
        if self.maximum is not None and value > self.maximum:
            raise SpecError(self.label, raw, self.accepted())
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise SpecError(self.label, raw, problem)
        return value

    def _convert(self, raw: Any) -> Any:
        if isinstance(raw, str):
            raw = raw.strip()
        try:
            if self.kind is bool:
                if isinstance(raw, bool):
                    return raw
                text = str(raw).lower()
                if text in _TRUE or text in _FALSE:
                    return text in _TRUE
                raise ValueError(raw)
            if self.kind is int:
                if isinstance(raw, bool) or isinstance(raw, float):
                    raise ValueError(raw)
                return int(str(raw), 10)
            if self.kind is float:
                if isinstance(raw, bool):
                    raise ValueError(raw)
                value = float(raw)
                if value != value or value in (float("inf"), float("-inf")):
                    raise ValueError(raw)
                return value
            if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
                raise ValueError(raw)
            text = str(raw)
            return self.normalize(text) if self.normalize else text
        except (TypeError, ValueError):
            raise SpecError(self.label, raw, self.accepted()) from None


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if value == int(value) else f"{value:g}"
