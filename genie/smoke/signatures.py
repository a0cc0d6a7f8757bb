"""Why a distributed run failed: the known signatures (:mod:`genie.smoke.known_failures`)
found in its output, each with its cause and fix. Pure: text in, explanations out."""

from __future__ import annotations

import re
from pathlib import Path

from genie import compat
from genie.i18n import _
from genie.smoke.known_failures import SIGNATURES, Explanation, Signature
from genie.smoke.torchrun_output import main_stacks, strip_prefixes

__all__ = ["SIGNATURES", "Explanation", "Signature", "explain"]

# Used when nothing more specific matched: the exception a rank raised.
_RAISED = Signature(
    "rank_raised",
    r"^(?P<error>(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)): (?P<message>.*)$",
    _("a rank raised {error}: {message}"),
    _("the traceback above shows where; fix that code (genie doctor checks the machine)"),
)


def explain(
    output: str, returncode: int | None, timed_out: bool = False, project: Path | None = None
) -> list[Explanation]:
    """Every known signature found in a failed run's output, in table order; ``project``
    (where the run's code is) makes the fixes name its files by path."""
    text = strip_prefixes(output)
    where = {"install": compat.install_command(project)}
    found = []
    for sig in SIGNATURES:
        if sig.timed_out is not None and sig.timed_out != timed_out:
            continue
        m = re.search(sig.pattern, text, re.MULTILINE)
        if m is None:
            continue
        values = {**where, **{k: v for k, v in m.groupdict().items() if v is not None}}
        if sig.id == "hung":
            values["where"] = _where_ranks_were(output)
        evidence = "" if sig.id == "hung" else _line_at(text, m.start())
        found.append(_fill(sig, values, evidence))
    if not found and returncode not in (0, None):
        errors = list(re.finditer(_RAISED.pattern, text, re.MULTILINE))
        if errors:
            m = errors[0]  # the first raised is the root cause; later ones are fallout
            found.append(_fill(_RAISED, m.groupdict(), m.group(0)))
    return found


def _fill(sig: Signature, values: dict[str, str], evidence: str) -> Explanation:
    return Explanation(
        sig.id,
        sig.cause.format_map(_Default(values)),
        sig.fix.format_map(_Default(values)),
        evidence.strip()[:200],
    )


class _Default(dict):
    def __missing__(self, key: str) -> str:
        return key.upper()  # a placeholder the user fills in: PORT, MODULE


def _line_at(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)]


def _where_ranks_were(output: str) -> str:
    """From faulthandler dumps: each rank's innermost frame outside the libraries, and the
    library function it was inside (``barrier``, ``all_reduce``)."""
    where = []
    for rank, frames in sorted(main_stacks(output).items()):
        own = next((f for f in frames if not f.library), None)
        if own is None:
            continue
        place = str(own)
        if frames[0].library:
            place += _(" (inside {f})").format(f=frames[0].function)
        where.append(_("rank {r} at {place}").format(r=rank, place=place))
    return ": " + "; ".join(where) if where else ""
