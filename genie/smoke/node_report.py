"""What went wrong on the simulated nodes of a multi-node smoke test, in words (pure): the
rank that failed first, the ranks it took down, and what became of each node's torchrun."""

from __future__ import annotations

from genie.i18n import _
from genie.smoke import process
from genie.smoke.plan import SmokePlan
from genie.smoke.torchrun_output import Failure, failures


def failed_ranks(texts: list[str]) -> list[tuple[int, Failure]]:
    """Every rank torchrun reported failed, with its node, given each node's output (pure):
    one entry per rank, its root-cause report where there is one, in time order."""
    found: dict[int, tuple[int, Failure]] = {}
    for node, text in enumerate(texts):
        for failure in failures(text):
            if failure.rank not in found or failure.root:
                found[failure.rank] = (node, failure)
    return sorted(found.values(), key=lambda x: (x[1].time, x[1].rank, x[0]))


def node_problems(p: SmokePlan, outcomes: list[process.JobOutcome], timeout: float) -> list[str]:
    """Which node did what wrong, in words (pure): the rank that failed first (each node's
    root cause, compared by torchrun's failure times), then the others, then each node."""
    problems = []
    if any(o.timed_out for o in outcomes):
        problems.append(
            _("timed out after {t:.0f} s; every process of every node was killed").format(t=timeout)
        )
    problems += _failed_first(failed_ranks(["".join(o.lines) for o in outcomes]))
    return problems + _node_fates(p, outcomes)


def _failed_first(found: list[tuple[int, Failure]]) -> list[str]:
    """The rank that failed first (each node's root cause, compared by torchrun's failure
    times), then the ranks it took down."""
    roots = [x for x in found if x[1].root] or found
    if not roots:
        return []
    earliest = min(f.time for _node, f in roots)
    first = [x for x in roots if x[1].time == earliest]
    problems = [
        _("rank {r} failed on node {n}").format(r=f.rank, n=node)
        + (f": {f.error}" if f.error else "")
        for node, f in first
    ]
    later = [x for x in found if x not in first]
    if later:
        problems.append(
            _("then rank(s) {r} failed (node(s) {n})").format(
                r=", ".join(str(f.rank) for _node, f in later),
                n=", ".join(str(n) for n in sorted({node for node, _f in later})),
            )
        )
    return problems


def _node_fates(p: SmokePlan, outcomes: list[process.JobOutcome]) -> list[str]:
    """What became of each node's torchrun."""
    problems = []
    for node, outcome in zip(p.nodes, outcomes, strict=True):
        if not outcome.started_children:
            problems.append(
                _(
                    "node {n} never joined: its torchrun started no worker (is {addr}:{port} "
                    "reachable from it?)"
                ).format(n=node.rank, addr=node.env["MASTER_ADDR"], port=node.env["MASTER_PORT"])
            )
        elif outcome.stopped and not outcome.timed_out:
            problems.append(_("node {n} was stopped after another node failed").format(n=node.rank))
        elif outcome.returncode not in (0, None) and not outcome.stopped:
            problems.append(
                _("node {n}: torchrun exited with {rc}").format(n=node.rank, rc=outcome.returncode)
            )
    return problems
