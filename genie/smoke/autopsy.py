"""``genie explain --hang DIR...``: what a hung run's ranks left in their hang/ folders
(the project's hang.py: Flight Recorder records, stacks, heartbeats), aligned by process
group and collective sequence number, said as one verdict line, then the evidence and
the fix. Pure reading: the records are pickles of plain values, read without torch and
refused if they hold anything else."""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

from genie.errors import GenieError
from genie.i18n import _

DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
          "Long": "int64", "Int": "int32", "Short": "int16", "Byte": "uint8", "Char": "int8",
          "Bool": "bool"}  # fmt: skip
NAME = re.compile(r"^(fr|stacks|heartbeat)-(.+)-rank(\d+)(\.json)?$")
# seconds a heartbeat may trail the newest before its rank counts as gone (3 beats)
LATE = 30.0


@dataclass(frozen=True)
class Call:
    """One collective as a rank recorded it."""

    seq: int
    op: str
    shapes: str
    site: str  # the first frame outside torch: "train.py:142"

    def said(self) -> str:
        return _("{op} of {shapes}, {site}").format(op=self.op, shapes=self.shapes, site=self.site)


@dataclass
class Rank:
    rank: int
    host: str = "?"
    calls: dict[str, dict[int, Call]] = field(default_factory=dict)  # group -> seq -> call
    stacks: dict | None = None
    heartbeat: dict | None = None


class _PlainValues(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:  # a record holds no objects
        raise pickle.UnpicklingError(f"{module}.{name}")


def load(folders: list[Path]) -> dict[int, Rank]:
    """Every rank's files in ``folders`` (a run's hang/ folder, each node's where they
    do not share one; its previous/ holds the attempt before)."""
    ranks: dict[int, Rank] = {}
    for folder in folders:
        if not folder.is_dir():
            raise GenieError(
                _("{d} is not a folder: pass the run's --log-dir/hang").format(d=folder)
            )
        for path in sorted(folder.iterdir()):
            match = NAME.match(path.name)
            if not match or not path.is_file():
                continue
            kind, host, number = match.group(1), match.group(2), int(match.group(3))
            rank = ranks.setdefault(number, Rank(number))
            rank.host = host
            _read(rank, kind, path)
    if not ranks:
        raise GenieError(
            _("no hang records in {d}: a project's runs write them into --log-dir/hang").format(
                d=", ".join(map(str, folders))
            )
        )
    return ranks


def _read(rank: Rank, kind: str, path: Path) -> None:
    try:
        if kind == "fr":
            trace = _PlainValues(io.BytesIO(path.read_bytes())).load()
            for entry in trace.get("entries", []):
                if not entry.get("is_p2p"):
                    group = str(entry["process_group"][1] or entry["process_group"][0])
                    call = _call(entry)
                    rank.calls.setdefault(group, {})[call.seq] = call
        elif kind == "stacks":
            rank.stacks = json.loads(path.read_text())
        else:
            rank.heartbeat = json.loads(path.read_text())
    except (OSError, ValueError, KeyError, TypeError, pickle.UnpicklingError, EOFError) as err:
        raise GenieError(_("cannot read {f}: {why}").format(f=path, why=err)) from None


def _call(entry: dict) -> Call:
    op = str(entry.get("profiling_name", "?")).split(":")[-1]
    shapes = ", ".join(
        f"{DTYPES.get(dtype, dtype)}{list(size)}"
        for dtype, size in zip(
            entry.get("input_dtypes", []), entry.get("input_sizes", []), strict=False
        )
    )
    return Call(int(entry["collective_seq_id"]), op, shapes or "-", _site(entry.get("frames", [])))


def _site(frames: list[dict]) -> str:
    for frame in frames:  # innermost first
        name = str(frame.get("filename", ""))
        if "/torch/" not in name and "/site-packages/" not in name and name:
            return f"{Path(name).name}:{frame.get('line')}"
    return "?"


def where(rank: Rank) -> str | None:
    """The innermost line of the project's own code in the rank's main thread."""
    if not rank.stacks or not rank.stacks.get("threads"):
        return None
    cwd = str(rank.stacks.get("cwd", ""))
    frames = rank.stacks["threads"][0]["frames"]
    own = [f for f in frames if str(f[0]).startswith(cwd) and not str(f[0]).endswith("hang.py")]
    filename, line, name = (own or frames)[-1]
    return f"{Path(filename).name}:{line} {name}()"


def ranks_text(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "ranks 0-2, 5"; one rank -> "rank 3"."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return (_("rank {r}") if len(numbers) == 1 else _("ranks {r}")).format(r=", ".join(parts))


@dataclass
class Verdict:
    kind: str  # mismatch, missing, dead, unknown
    line: str
    fix: str
    culprits: list[int]


def diagnose(ranks: dict[int, Rank]) -> Verdict:
    """The first cause the records show: ranks that called different collectives at one
    sequence number, then a rank that never entered a collective the others did."""
    world = sorted(ranks)
    groups = sorted({g for r in ranks.values() for g in r.calls})
    for group in groups:
        found = _mismatch(ranks, group) or _missing(ranks, group, world)
        if found:
            return found
    dead = _dead(ranks)
    if dead:
        return dead
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
            return Verdict("mismatch", line, fix, odd)
    return None


def _missing(ranks: dict[int, Rank], group: str, world: list[int]) -> Verdict | None:
    last = {n: max(ranks[n].calls.get(group, {0: None})) for n in world}
    top = max(last.values())
    entered = [n for n in world if last[n] == top]
    # Where ranks were asked for their stacks (gloo: the failing rank asks), one that
    # wrote nothing had ended: _dead says so. Unasked (NCCL's watchdog ends the ranks
    # before they can ask), a rank without records is simply behind.
    asked = any(r.stacks for r in ranks.values())
    behind = [
        n for n in world
        if last[n] < top and (ranks[n].calls or ranks[n].stacks or not asked)
    ]  # fmt: skip
    if not behind or top == 0:
        return None
    call = ranks[entered[0]].calls[group][top]
    line = _("collective #{seq} ({call}): {entered} entered it, {behind} never did").format(
        seq=top, call=call.said(), entered=ranks_text(entered), behind=ranks_text(behind)
    )
    places = [(n, where(ranks[n])) for n in behind]
    said = [_("rank {r} was in {where}").format(r=n, where=w) for n, w in places if w]
    if said:
        line += "; " + "; ".join(said)
    fix = _(
        "the rank that never arrived was busy elsewhere (its stack below): work longer than "
        "--dist-timeout on some ranks only (tokenizing, downloading, evaluating on rank 0) "
        "belongs before the training starts (data.prepare) or on every rank; a loop that "
        "never ends or a stuck DataLoader worker is a bug at that line"
    )
    return Verdict("missing", line, fix, behind)


def _dead(ranks: dict[int, Rank]) -> Verdict | None:
    """Ranks that did not answer when another failed (no stacks), or whose heartbeat
    stopped LATE seconds before the newest: their processes had ended."""
    beats = {n: r.heartbeat for n, r in ranks.items() if r.heartbeat}
    if not beats:
        return None
    newest = max(b["time"] for b in beats.values())
    asked = any(r.stacks for r in ranks.values())
    gone = [
        n for n, b in beats.items()
        if not ranks[n].stacks and (asked or newest - b["time"] > LATE)
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


def report(ranks: dict[int, Rank]) -> tuple[Verdict, list[str]]:
    """The verdict, and its lines: itself first, then the fix, then the culprits' stacks
    and every rank's heartbeat."""
    verdict = diagnose(ranks)
    lines = [verdict.line]
    if verdict.fix:
        lines.append(_("fix: {fix}").format(fix=verdict.fix))
    for n in verdict.culprits[:2]:
        stacks = ranks[n].stacks
        if stacks and stacks.get("threads"):
            lines.append(_("rank {r}'s stack ({host}, most recent call last):").format(
                r=n, host=ranks[n].host))  # fmt: skip
            for filename, line, name in stacks["threads"][0]["frames"][-8:]:
                lines.append(f"  {filename}:{line} {name}")
    for n, r in sorted(ranks.items()):
        if r.heartbeat:
            beat = r.heartbeat
            lines.append(_("rank {r} ({host}): step {step}, {phase}").format(
                r=n, host=r.host, step=beat["step"], phase=beat["phase"]))  # fmt: skip
    return verdict, lines
