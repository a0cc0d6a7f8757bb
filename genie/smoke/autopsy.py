"""``genie explain --hang DIR...``: what a hung run's ranks left in their hang/ folders
(the project's hang.py: Flight Recorder records, stacks, heartbeats), aligned by process
group and collective sequence number, said as one verdict line, then the evidence and
the fix. Records a failure left are read for its cause (mismatch, missing, dead,
network); records asked of a running run (``touch hang/ask``) for a straggler or a rank
stuck for STALL seconds, else the run is healthy. hang_records reads them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from genie.i18n import _
from genie.smoke.hang_records import Rank, load, ranks_text, where, worker_where

__all__ = ["LATE", "Verdict", "diagnose", "load", "ranks_text", "report"]

# seconds a heartbeat may trail the newest before its rank counts as gone (3 beats)
LATE = 30.0
# asked of a running run: ranks that waited this long in a collective wait for a stuck one
STALL = 60.0
# a straggler: the last to arrive, by more than LAG seconds, at STRAGGLER of the
# collectives where some rank was that late, and the others waited for it at least
# WAITED of the time the records span (entry times on the nodes' clocks)
LAG, STRAGGLER, WAITED = 0.01, 0.8, 0.05
# an error of the connection between ranks, not of the code (gloo's and NCCL's words)
COMMUNICATION = re.compile(
    r"timed? ?out|connection|socket|peer|DistNetworkError|DistBackendError|NCCL", re.IGNORECASE
)


@dataclass
class Verdict:
    kind: str  # mismatch, missing, dead, network, slow, healthy, unknown
    line: str
    fix: str
    culprits: list[int]
    seq: int | None = None  # the collective it names (missing, mismatch)


def diagnose(ranks: dict[int, Rank]) -> Verdict:
    """The first cause the records show: ranks that called different collectives at one
    sequence number, a collective every rank came to that failed on the connection, a
    rank that never entered a collective the others did, a rank that had ended, a
    straggler."""
    world = sorted(ranks)
    groups = sorted({g for r in ranks.values() for g in r.calls})
    # told: some rank failed and asked the others for their stacks; without any stacks
    # (NCCL's watchdog ended the ranks), a failure too; only asked: a running run's
    told = any(r.reason not in (None, "asked") for r in ranks.values())
    failure = told or not any(r.stacks for r in ranks.values())
    for group in groups:
        found = (
            _mismatch(ranks, group)
            or (failure and _network(ranks, group, world))
            or _missing(ranks, group, world, failure)
        )
        if found:
            return found
    found = _dead(ranks, told)
    for group in groups:
        found = found or _slow(ranks, group, world)
    if found:
        return found
    if not failure:
        line = _("every rank answered and none is behind or late: the run looks healthy")
        return Verdict("healthy", line, "", [])
    return Verdict("unknown", _("the records show no collective that some rank missed"), "", [])


def _mismatch(ranks: dict[int, Rank], group: str) -> Verdict | None:
    recorded = {n: r.calls[group] for n, r in ranks.items() if group in r.calls}
    shared = set.intersection(*(set(calls) for calls in recorded.values()))
    for seq in sorted(shared):
        kinds: dict[tuple[str, str], list[int]] = {}
        for n, calls in recorded.items():
            kinds.setdefault((calls[seq].op, calls[seq].shapes), []).append(n)
        if len(kinds) > 1:
            (common, most), *others = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
            odd = [n for _, ns in others for n in ns]
            first = recorded[odd[0]][seq]
            line = _(
                "collective #{seq} does not match: {odd} called {theirs}, {most} called {ours}"
            ).format(seq=seq, odd=ranks_text(odd), theirs=first.said(), most=ranks_text(most),
                     ours=recorded[most[0]][seq].said())  # fmt: skip
            fix = _(
                "every rank must call the same collectives in the same order with the same "
                "shapes: look for a collective under a rank-dependent branch (if rank == 0) "
                "or data-dependent shapes at the two lines"
            )
            return Verdict("mismatch", line, fix, odd, seq)
    return None


def _missing(ranks: dict[int, Rank], group: str, world: list[int], failure: bool) -> Verdict | None:
    last = {n: max(ranks[n].calls.get(group, {0: None})) for n in world}
    top = max(last.values())
    entered = [n for n in world if last[n] == top]
    if top == 0:
        return None
    call = ranks[entered[0]].calls[group][top]
    # a rank that entered after the first had waited its timeout came too late
    entry = {n: ranks[n].calls[group][top].created for n in entered}
    first = min(entry.values())
    late = [n for n in entered if call.timeout and entry[n] - first > call.timeout]
    entered = [n for n in entered if n not in late]
    # Where ranks were asked for their stacks (gloo: the failing rank asks), one that
    # wrote nothing had ended: _dead says so. Unasked (NCCL's watchdog ends the ranks
    # before they can ask), a rank without records is simply behind.
    asked = any(r.stacks for r in ranks.values())
    behind = late + [
        n for n in world
        if last[n] < top and (ranks[n].calls or ranks[n].stacks or not asked)
    ]  # fmt: skip
    # asked of a running run: the others may simply be a moment ahead
    now = max((r.stacks or {}).get("time", 0.0) for r in ranks.values())
    if not behind or (not failure and now - first < STALL):
        return None
    line = _("collective #{seq} ({call}): {entered} entered it").format(
        seq=top, call=call.said(), entered=ranks_text(entered)
    )
    if behind != late:
        line += _(", {behind} never did").format(behind=ranks_text(behind[len(late) :]))
    if late:
        line += _(", {late} only {s:.0f} s later, past the {t:.0f} s timeout").format(
            late=ranks_text(late), s=max(entry[n] for n in late) - first, t=call.timeout
        )
    # a failing rank's stack is its error handler's: where it waited is the told ones'
    places = [(n, where(ranks[n])) for n in behind if ranks[n].reason != "failed"]
    said = [_("rank {r} was in {where}").format(r=n, where=w) + _waiting(ranks[n])
            for n, w in places if w]  # fmt: skip
    if said:
        line += "; " + "; ".join(said)
    fix = _(
        "the rank that never arrived was busy elsewhere (its stack below): work longer than "
        "--dist-timeout on some ranks only (tokenizing, downloading, evaluating on rank 0) "
        "belongs before the training starts (data.prepare) or on every rank; a loop that "
        "never ends or a stuck DataLoader worker is a bug at that line"
    )
    return Verdict("missing", line, fix, behind, top)


def _waited_for(rank: Rank) -> tuple[int, str] | None:
    """The DataLoader worker a rank waits for (its phase: data) and its line."""
    return worker_where(rank) if (rank.stacks or {}).get("phase") == "data" else None


def _waiting(rank: Rank) -> str:
    worker = _waited_for(rank)
    return (
        _(", waiting for its DataLoader worker in {where}").format(where=worker[1])
        if worker
        else ""
    )


def _dead(ranks: dict[int, Rank], told: bool) -> Verdict | None:
    """Ranks that did not answer when another failed (no stacks), or whose heartbeat
    stopped LATE seconds before the newest: their processes had ended."""
    beats = {n: r.heartbeat for n, r in ranks.items() if r.heartbeat}
    if not beats:
        return None
    newest = max(b["time"] for b in beats.values())
    gone = [
        n for n, b in beats.items()
        if not ranks[n].stacks and (told or newest - b["time"] > LATE)
    ]  # fmt: skip
    if not gone:
        return None
    b = beats[gone[0]]
    line = _(
        "{ranks} had ended: its last heartbeat was at step {step} ({phase}), {s:.0f} s "
        "before the others' last, and it wrote no stacks when asked (or it is stuck in "
        "native code that holds Python's lock)"
    ).format(ranks=ranks_text(gone), s=newest - b["time"], step=b["step"], phase=b["phase"])
    fix = _(
        "read that rank's exit in the torchrun log (genie explain LOG): a signal 9 is most "
        "often the kernel's out-of-memory killer (dmesg), a signal 7 /dev/shm"
    )
    return Verdict("dead", line, fix, gone)


def _network(ranks: dict[int, Rank], group: str, world: list[int]) -> Verdict | None:
    """Every rank came to the last collective in time (or failed itself in the one before
    it: its data never came), and every rank that failed did on a connection error: the
    network between them, not the code."""
    errors = {n: (ranks[n].stacks or {}).get("error") or "" for n in world
              if ranks[n].reason == "failed"}  # fmt: skip
    calls = {n: ranks[n].calls.get(group, {}) for n in world}
    if not errors or not all(map(COMMUNICATION.search, errors.values())):
        return None
    if not all(calls.values()):
        return None
    top = max(max(c) for c in calls.values())
    behind = [n for n in world if max(calls[n]) < top]
    if any(max(calls[n]) < top - 1 or n not in errors for n in behind):
        return None
    came = [calls[n][top] for n in world if n not in behind]
    if (
        came[0].timeout
        and max(c.created for c in came) - min(c.created for c in came) > came[0].timeout
    ):
        return None  # one came after the others had given up: _missing's
    first = min(errors)
    line = _(
        "collective #{seq} ({call}): every rank came to it and the connection between them "
        "({hosts}) failed ({rank}: {error})"
    ).format(seq=top, call=came[0].said(), hosts=", ".join(sorted({ranks[n].host for n in world})),
             rank=ranks_text([first]), error=errors[first])  # fmt: skip
    fix = _(
        "the code is not at fault: check the link between those nodes with genie doctor "
        "--reach on each (a firewall, a link or switch that went down, a wrong interface: "
        "NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), then start again: the run resumes from "
        "its last checkpoint"
    )
    return Verdict("network", line, fix, [])


def _slow(ranks: dict[int, Rank], group: str, world: list[int]) -> Verdict | None:
    """A rank (or a node's ranks) the others keep waiting for at their collectives."""
    calls = [ranks[n].calls.get(group, {}) for n in world]
    shared = sorted(set.intersection(*(set(c) for c in calls))) if len(world) > 1 else []
    lost: dict[int, float] = dict.fromkeys(world, 0.0)  # the others' wait for each rank
    count: Counter[int] = Counter()  # the collectives it came last to
    for seq in shared:
        arrived = sorted((ranks[n].calls[group][seq].created, n) for n in world)
        (second, _other), (last, n) = arrived[-2:]
        if last - second > LAG:
            lost[n] += last - second
            count[n] += 1
    times = [ranks[n].calls[group][seq].created for n in world for seq in shared]
    span = max(times, default=0.0) - min(times, default=0.0)
    if not count or span <= 0:
        return None
    hosts = dict.fromkeys(ranks[n].host for n in world)  # in rank order: ties go to the first
    # a node's ranks, where there are other nodes: all ranks are late to no one
    nodes = [[n for n in world if ranks[n].host == h] for h in hosts] if len(hosts) > 1 else []
    for candidates in [[n] for n in world], nodes:  # a rank, else a node's ranks
        if not candidates:
            continue
        late = max(candidates, key=lambda ns: sum(count[n] for n in ns))
        mine = sum(count[n] for n in late)
        waited = sum(lost[n] for n in late)
        if mine >= STRAGGLER * sum(count.values()) and waited >= WAITED * span:
            break
    else:
        return None
    line = _(
        "straggler: {ranks} ({host}) came last to {mine} of the last {all} collectives, "
        "{lag:.2f} s after the others on average; they waited for it {share:.0%} of the "
        "{span:.0f} s recorded"
    ).format(ranks=ranks_text(late), host=ranks[late[0]].host, mine=mine, all=len(shared),
             lag=waited / mine, share=waited / span, span=span)  # fmt: skip
    fix = _(
        "look at what that rank does more slowly: its GPU (clocks throttled, another "
        "process on it: nvidia-smi), its host (DataLoader workers short of CPU: genie "
        "doctor), or its data (longer sequences or a larger shard than the others')"
    )
    return Verdict("slow", line, fix, late)


def report(
    ranks: dict[int, Rank], second: Callable[[Verdict], str | None] | None = None
) -> tuple[Verdict, list[str]]:
    """The verdict, and its lines: itself first, then the fix, then what ``second`` (a
    second opinion) says of it, then the culprits' stacks and where every rank was last
    (its heartbeat, or its stacks where newer)."""
    verdict = diagnose(ranks)
    lines = [verdict.line]
    if verdict.fix:
        lines.append(_("fix: {fix}").format(fix=verdict.fix))
    said = second(verdict) if second else None
    if said:
        lines.append(said)
    for n in verdict.culprits[:2]:
        stacks = ranks[n].stacks
        if stacks and stacks.get("threads"):
            lines.append(_("rank {r}'s stack ({host}, most recent call last):").format(
                r=n, host=ranks[n].host))  # fmt: skip
            for filename, line, name in stacks["threads"][0]["frames"][-8:]:
                lines.append(f"  {filename}:{line} {name}")
        worker = _waited_for(ranks[n])
        if worker:
            lines.append(_("its DataLoader worker's stack (pid {pid}, most recent call last):")
                         .format(pid=worker[0]))  # fmt: skip
            for filename, line, name in ranks[n].workers[worker[0]][-8:]:
                lines.append(f"  {filename}:{line} {name}")
    for n, r in sorted(ranks.items()):
        beats = [b for b in (r.heartbeat, r.stacks) if b]  # the stacks say it too, later
        if beats:
            beat = max(beats, key=lambda b: b.get("time", 0.0))
            lines.append(_("rank {r} ({host}): step {step}, {phase}").format(
                r=n, host=r.host, step=beat["step"], phase=beat["phase"]))  # fmt: skip
    return verdict, lines
