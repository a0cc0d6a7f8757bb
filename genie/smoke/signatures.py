"""Why a distributed run failed: the known signatures (:mod:`genie.smoke.known_failures`)
found in its output, each with its cause and fix. Pure: text in, explanations out."""

from __future__ import annotations

import re
from pathlib import Path

from genie import compat
from genie.i18n import _
from genie.smoke.known_failures import SIGNATURES, Explanation, Signature
from genie.smoke.torchrun_output import main_stacks, strip_prefixes

__all__ = ["SIGNATURES", "Explanation", "Signature", "explain", "ended", "harmless"]

# The last line a project's launch script prints (partials/start.sh.j2).
_ENDED = re.compile(r"^launch: torchrun on (?P<host>\S+) exited (?P<status>\d+)$", re.MULTILINE)
# What torch prints in runs that go well, and why it does no harm.
HARMLESS = (
    (
        r"\[c10d\] The hostname of the client socket cannot be retrieved",
        _(
            "'[c10d] The hostname of the client socket cannot be retrieved' is harmless: torch "
            "looks up a name for each peer's address, and these have none in DNS"
        ),
    ),
    (
        r"recvValueWithTimeout failed|failed to shutdown the rendezvous",
        _(
            "a TCPStore error at the end of a run that exited 0 is harmless: node 0's store "
            "closed while this node's agent was saying goodbye"
        ),
    ),
)

# Used when nothing more specific matched: the exception a rank raised.
_RAISED = Signature(
    "rank_raised",
    r"^(?P<error>(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)): (?P<message>.*)$",
    _("a rank raised {error}: {message}"),
    _("the traceback above shows where; fix that code (genie doctor checks the machine)"),
)


_FALLOUT = ("peer_lost",)  # what a rank's death leaves on the others
_LOST_PEER = next(sig.pattern for sig in SIGNATURES if sig.id == "peer_lost")


def explain(
    output: str, returncode: int | None, timed_out: bool = False, project: Path | None = None
) -> list[Explanation]:
    """Every known signature found in a failed run's output, the first seen first: in a
    log read in time order the first cause is the root, later ones are often its fallout.
    ``project`` (where the run's code is) makes the fixes name its files by path."""
    text = strip_prefixes(output)
    where = {"install": compat.install_command(project)}
    found: list[tuple[int, Explanation]] = []
    for sig in SIGNATURES:
        if sig.timed_out is not None and sig.timed_out != timed_out:
            continue
        m = re.search(sig.pattern, text, re.MULTILINE)
        if m is None:
            continue
        values = {**where, **{k: v for k, v in m.groupdict().items() if v is not None}}
        if sig.id == "hung":
            values["where"] = _where_ranks_were(output)
        # where it shows: the group named "at", else the whole match; a timeout comes last
        at = len(text) if sig.id == "hung" else m.start("at" if m.groupdict().get("at") else 0)
        evidence = "" if sig.id == "hung" else _line_at(text, at)
        found.append((at, _fill(sig, values, evidence)))
    # A rank that raised (not a connection error: the loss of its peer) is the root cause
    # when all else found is what its death left on the other ranks.
    fallout = all(e.id in _FALLOUT for _at, e in found)
    if fallout and returncode not in (0, None):
        errors = [m for m in re.finditer(_RAISED.pattern, text, re.MULTILINE)
                  if not re.search(_LOST_PEER, m.group(0))]  # fmt: skip
        if errors:
            m = errors[0]  # the first raised is the root cause; later ones are fallout
            found = [(m.start(), _fill(_RAISED, m.groupdict(), m.group(0)))]
    if any(e.id == "not_rejoined" for _at, e in found):  # they had met: not "never met"
        found = [(at, e) for at, e in found if e.id != "rendezvous_timeout"]
    return [e for _at, e in sorted(found, key=lambda pair: pair[0])]


def ended(output: str) -> tuple[str, int] | None:
    """(host, exit status) from the last line the project's launch script printed."""
    found = list(_ENDED.finditer(strip_prefixes(output)))
    return (found[-1]["host"], int(found[-1]["status"])) if found else None


def harmless(output: str) -> list[str]:
    """Why each known harmless message in ``output`` does no harm."""
    return [note for pattern, note in HARMLESS if re.search(pattern, output)]


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
