"""The field machinery: one declared answer with its type, choices, range and checks.

:meth:`Field.parse` judges a flag string, a YAML value or a wizard reply the same way.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from genie import compat
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
    optional: bool = False  # an empty answer means "not set" (None)
    # when the plain default breaks a rule: the nearest value that keeps them (or None, then
    # the first allowed choice is taken)
    nearest: Callable[[Any, Answers], Any] | None = None
    # why this machine offers no default (the default is None here), for a run without the
    # wizard: (the value the default would have been, what to do instead)
    no_default: Callable[[Machine], tuple[str, str]] | None = None

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
            return _("{kind} >= {low}").format(kind=kind, low=low)
        return kind

    def titles(self, choices: tuple[str, ...] | None = None) -> list[str]:
        """The choices as listed: each with its mark, e.g. "2.15 (not verified by genie yet)"."""
        marks = self.marks or {}
        return [f"{c} ({marks[c]})" if c in marks else c for c in choices or self.choices or ()]

    def parse(self, raw: Any) -> Any:
        """Turn a flag string, YAML value or wizard reply into a valid value, or raise."""
        if self.optional and (raw is None or (isinstance(raw, str) and not raw.strip())):
            return None
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


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOST_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


# ---------------------------------------------------------------- value checks


def check_name(value: str) -> str | None:
    if _NAME_RE.match(value) and ".." not in value:
        return None
    return _(
        "letters, digits, '-', '_' and '.', starting with a letter or digit, "
        "at most 64 characters (no '/' or '..')"
    )


def check_master_addr(value: str) -> str | None:
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.is_loopback or ip.is_unspecified:
            return _(
                "other nodes cannot reach a loopback address; use this node's IP or hostname "
                "as the other nodes see it"
            )
        return None
    labels = value.rstrip(".").split(".")
    if not value or len(value) > 253 or not all(_HOST_LABEL_RE.match(x) for x in labels):
        return _("a hostname or IP address that every node can reach")
    if value.lower() in _LOOPBACK_NAMES:
        return _(
            "other nodes cannot reach localhost; use this node's IP or hostname "
            "as the other nodes see it"
        )
    return None


# A version as users write it: major.minor, or major.minor.patch (2.14, 2.14.1); nothing else
_VERSION_RE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


def normalize_minor(text: str) -> str:
    """``2.14.1`` -> ``2.14``; anything not a version is left as it is, for the check to refuse."""
    if not _VERSION_RE.fullmatch(text):
        return text
    return compat.format_minor(compat.parse_minor(text))


def check_python(value: str) -> str | None:
    if not _VERSION_RE.fullmatch(value):
        return _("a Python version such as 3.11")
    version = compat.parse_minor(value)
    if not (3, 7) <= version <= (3, 15):
        return _("a Python version from 3.7 to 3.15")
    return None


_SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9_.,-]{1,128}$")
_SLURM_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d\d){0,2}$")
_IMAGE_RE = re.compile(r"^[a-z0-9][A-Za-z0-9._/:@-]{0,254}$")


def check_slurm_name(value: str) -> str | None:
    if _SLURM_NAME_RE.match(value):
        return None
    return _("letters, digits, '_', '.', ',' and '-' (as SLURM names them)")


def check_slurm_time(value: str) -> str | None:
    if _SLURM_TIME_RE.match(value):
        return None
    return _("a SLURM time limit: MINUTES, HH:MM:SS or DAYS-HH:MM:SS")


def check_image(value: str) -> str | None:
    if _IMAGE_RE.match(value):
        return None
    return _("a container image reference such as ghcr.io/you/project:1.0")


_QUANTITY_RE = re.compile(r"^[1-9][0-9]{0,5}(Mi|Gi|Ti|Pi)$")
_K8S_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


def check_quantity(value: str) -> str | None:
    if _QUANTITY_RE.match(value):
        return None
    return _("a volume size such as 500Gi or 2Ti")


def check_k8s_name(value: str) -> str | None:
    if _K8S_NAME_RE.match(value):
        return None
    return _(
        "a Kubernetes name: lower-case letters, digits, '-' and '.' (kubectl get storageclass)"
    )
