"""The errors a user can cause, and genie's exit statuses. :func:`genie.cli.main` is the one
place that turns an error into its message (one line) and its exit status; anything else is
a bug in genie and keeps its traceback."""

from __future__ import annotations

# genie's exit statuses, for scripts that call it. Every command uses these and no other.
OK = 0
FAILED = 1  # the command ran and its answer is no: a failed smoke test, check or merge; cancelled
BAD_INPUT = 2  # an answer, a flag, a file or the machine stops the command before it runs
INTERRUPTED = 130  # Ctrl-C, or no more input at a prompt (128 + SIGINT, as a shell says)


class GenieError(Exception):
    """Something the user can fix. ``str(err)`` says what is wrong and how to fix it; an
    empty message means the command has already said everything."""

    exit_code = BAD_INPUT
    # how the message is shown: "error" (red, on stderr) or "info" (a plain line, on stdout)
    shown_as = "error"


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

    exit_code = INTERRUPTED


class Declined(GenieError):
    """The user chose Cancel at the summary: nothing was written."""

    exit_code = FAILED
    shown_as = "info"


class SmokeFailed(GenieError):
    """The generated (or converted) project did not pass its smoke test."""

    exit_code = FAILED


class CheckFailed(GenieError):
    """At least one of ``genie doctor``'s checks failed."""

    exit_code = FAILED


class NothingMatched(GenieError):
    """``genie explain`` found no known failure in the log (it has said so already)."""

    exit_code = FAILED


class DoesNotFit(GenieError):
    """``genie plan`` predicts that the project does not fit its GPUs (it has said so)."""

    exit_code = FAILED


class Conflicts(GenieError):
    """``genie upgrade`` left conflicts in the project for the user to resolve."""

    exit_code = FAILED
