"""The records a project's hang.py leaves in --log-dir/hang, read back: every rank's
collectives (the Flight Recorder's pickle, read without torch and refused if it holds
anything but plain values), stacks, heartbeat and its DataLoader workers' stacks.
``genie explain --hang`` (autopsy) turns them into a verdict."""

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
NAME = re.compile(r"^(fr|stacks|heartbeat|workers)-(.+)-rank(\d+)(\.json|\.txt)?$")
# faulthandler's text, as a project's DataLoader workers write it (innermost call first)
WORKER = re.compile(r"^worker pid (\d+)$")
FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.+)$')


@dataclass(frozen=True)
class Call:
    """One collective as a rank recorded it."""

    seq: int
    op: str
    shapes: str
    site: str  # the first frame outside torch: "train.py:142"
    created: float = field(default=0.0, compare=False)  # entered, seconds (its node's clock)
    timeout: float = field(default=0.0, compare=False)  # seconds it waits for the others

    def said(self) -> str:
        return _("{op} of {shapes}, {site}").format(op=self.op, shapes=self.shapes, site=self.site)


@dataclass
class Rank:
    rank: int
    host: str = "?"
    calls: dict[str, dict[int, Call]] = field(default_factory=dict)  # group -> seq -> call
    stacks: dict | None = None
    heartbeat: dict | None = None
    trace: dict | None = None  # the Flight Recorder's record as read (plain values only)
    # its DataLoader workers: pid -> frames, innermost call last (its main thread's)
    workers: dict[int, list[tuple[str, int, str]]] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        """Why it wrote its stacks: "failed", "told" (another failed), "asked"."""
        return self.stacks.get("reason", "told") if self.stacks else None


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
            trace = rank.trace = _PlainValues(io.BytesIO(path.read_bytes())).load()
            for entry in trace.get("entries", []):
                if not entry.get("is_p2p"):
                    group = str(entry["process_group"][1] or entry["process_group"][0])
                    call = _call(entry)
                    rank.calls.setdefault(group, {})[call.seq] = call
        elif kind == "stacks":
            rank.stacks = json.loads(path.read_text())
        elif kind == "workers":
            rank.workers = _workers(path.read_text())
        else:
            rank.heartbeat = json.loads(path.read_text())
    except (OSError, ValueError, KeyError, TypeError, pickle.UnpicklingError, EOFError) as err:
        raise GenieError(_("cannot read {f}: {why}").format(f=path, why=err)) from None


def _workers(text: str) -> dict[int, list[tuple[str, int, str]]]:
    """Each worker's thread that took the signal (faulthandler's "Current thread": its
    main one), innermost call last."""
    found: dict[int, list[tuple[str, int, str]]] = {}
    pid, current = None, False
    for line in text.splitlines():
        if worker := WORKER.match(line):
            pid, current = int(worker[1]), False
            found[pid] = []
        elif line.startswith(("Current thread", "Thread ")):
            current = line.startswith("Current thread")
        elif (frame := FRAME.match(line)) and pid is not None and current:
            found[pid].insert(0, (frame[1], int(frame[2]), frame[3]))
    return found


def _call(entry: dict) -> Call:
    op = str(entry.get("profiling_name", "?")).split(":")[-1]
    shapes = ", ".join(
        f"{DTYPES.get(dtype, dtype)}{list(size)}"
        for dtype, size in zip(
            entry.get("input_dtypes", []), entry.get("input_sizes", []), strict=False
        )
    )
    return Call(
        int(entry["collective_seq_id"]), op, shapes or "-", _site(entry.get("frames", [])),
        (entry.get("time_created_ns") or 0) / 1e9, (entry.get("timeout_ms") or 0) / 1e3,
    )  # fmt: skip


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
    frames = rank.stacks["threads"][0]["frames"]
    return _said((_own(frames, str(rank.stacks.get("cwd", ""))) or frames)[-1])


def worker_where(rank: Rank) -> tuple[int, str] | None:
    """A DataLoader worker of ``rank`` in the project's own code, and that line."""
    cwd = str((rank.stacks or {}).get("cwd", ""))
    for pid, frames in sorted(rank.workers.items()):
        own = _own(frames, cwd) if cwd else []
        if own:
            return pid, _said(own[-1])
    return None


def _own(frames: list, cwd: str) -> list:
    """The frames in the project's own code (hang.py aside), innermost last."""
    return [f for f in frames if str(f[0]).startswith(cwd) and not str(f[0]).endswith("hang.py")]


def _said(frame: list | tuple) -> str:
    filename, line, name = frame
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
