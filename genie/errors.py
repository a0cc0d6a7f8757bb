"""The errors a user can cause. The CLI prints their message on one line and exits non-zero;
anything else is a bug in genie and keeps its traceback."""

from __future__ import annotations


class GenieError(Exception):
    """Something the user can fix. ``str(err)`` says what is wrong and how to fix it."""

    exit_code = 2


class SpecError(GenieError):
    """An answer (flag, answers-file key or wizard reply) is invalid."""

    def __init__(self, field: str, value: object, accepted: str) -> None:
        self.field = field
        self.value = value
        self.accepted = accepted
        from genie.i18n import _

        super().__init__(
            _("{field}: {value!r} is not valid: {accepted}").format(
                field=field, value=value, accepted=accepted
            )
        )


class Aborted(GenieError):
    """The user interrupted genie (Ctrl-C, or end of input at a prompt)."""

    exit_code = 130


class SmokeFailed(GenieError):
    """The generated project did not pass its smoke test."""

    exit_code = 1
