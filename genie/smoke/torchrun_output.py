"""The one reader of what torchrun prints. Pure: text in, facts out.

- Line prefixes: ``--tee`` starts each piece of a rank's output with ``[default1]:`` (the role
  name, then the local rank) and torch's exception hook adds ``[rank1]:`` (the global rank).
- The failure summary torchrun prints when a worker fails: one block per failed rank
  (``time``, ``rank``, ``exitcode``, ``traceback``), the first under ``Root Cause``.
- Stack dumps: faulthandler's ``Current thread ... (most recent call first)`` sections, which
  a rank writes when it is sent SIGABRT at a timeout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "[default1]:" (any role name but "rank"), then "[rank1]:", then one space; each optional
PREFIX = re.compile(r"^(?:\[(?!rank\d)[A-Za-z_]*(?P<local>\d+)\]:)?(?:\[rank(?P<rank>\d+)\]:)? ?")
RAISED = re.compile(
    r"^\s*(?P<error>(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)): ?(?P<message>.*)$"
)
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|<frozen ")
# the summary's fields, "  rank      : 3 (local_rank: 1)"
_FIELD = re.compile(r"^\s*(?P<key>time|rank|exitcode|traceback)\s*:\s*(?P<value>.*)$")
_RULE = re.compile(r"^(?:=+|-+)$")


def unprefix(line: str) -> tuple[int | None, str]:
    """``"[default1]:[rank1]: x"`` -> ``(1, "x")``: the global rank when torch named it, else
    the local rank; None for a line without a prefix."""
    m = PREFIX.match(line)
    assert m is not None  # every part is optional
    rank = m.group("rank") or m.group("local")
    return (int(rank) if rank is not None else None), line[m.end() :]


def global_rank(line: str) -> int | None:
    """The global rank torch's exception hook put on ``line`` (``[rank3]:``), or None."""
    m = PREFIX.match(line)
    assert m is not None
    return int(m.group("rank")) if m.group("rank") is not None else None


def strip_prefixes(text: str) -> str:
    """``text`` without the prefixes (each line's)."""
    return "\n".join(unprefix(line)[1] for line in text.splitlines())


@dataclass(frozen=True)
class Failure:
    """One block of torchrun's failure summary."""

    rank: int  # global
    time: str  # torchrun's, to the second; "" when the block has none
    exitcode: int | None  # negative: killed by that signal
    error: str  # the exception the rank raised ("RuntimeError: boom"), "" when none is known
    root: bool  # listed under "Root Cause (first observed failure)"


def failures(output: str) -> list[Failure]:
    """Every block of torchrun's failure summary in ``output``, in the order printed. A rank's
    error is the last exception of its block's traceback, else the last one it printed itself
    (``[rankN]: XError: ...``)."""
    own: dict[int, str] = {}
    found: list[Failure] = []
    block: dict[str, str] | None = None
    root, in_traceback = False, False
    lines = output.splitlines()
    for line in [*lines, "="]:  # a last rule closes the last block
        rank, text = global_rank(line), unprefix(line)[1]
        if rank is not None and (m := RAISED.match(text)):
            own[rank] = f"{m['error']}: {m['message']}".strip()
            continue
        if "Root Cause" in line:
            root = True
        field = _FIELD.match(line)
        if field and field["key"] == "time" and block is not None and "rank" in block:
            found.append(_failure(block, own))  # a block without a closing rule
            block = None
        if field and (field["key"] == "time" or (field["key"] == "rank" and block is None)):
            block = {"root": "1" if root else ""}
            root = False
        if block is None:
            continue
        if field:
            block[field["key"]] = field["value"].strip()
            in_traceback = field["key"] == "traceback"
            if in_traceback and (m := RAISED.match(field["value"])):
                block["error"] = f"{m['error']}: {m['message']}".strip()
        elif _RULE.match(line.strip()) or line.startswith("["):
            if "rank" in block:
                found.append(_failure(block, own))
            block, in_traceback = None, False
        elif in_traceback and (m := RAISED.match(line)):
            block["error"] = f"{m['error']}: {m['message']}".strip()
    return found


def _failure(block: dict[str, str], own: dict[int, str]) -> Failure:
    rank = int(block["rank"].split()[0])
    code = re.match(r"-?\d+", block.get("exitcode", ""))
    return Failure(
        rank=rank,
        time=block.get("time", ""),
        exitcode=int(code.group(0)) if code else None,
        error=block.get("error") or own.get(rank, ""),
        root=bool(block["root"]),
    )


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str

    @property
    def library(self) -> bool:
        return bool(_LIBRARY.search(self.path))

    def __str__(self) -> str:
        return f"{self.path.rsplit('/', 1)[-1]}:{self.line} in {self.function}"


def main_stacks(output: str) -> dict[int, list[Frame]]:
    """Each rank's ``Current thread`` stack from faulthandler dumps, innermost frame first
    (the first dump of each rank; other threads are left out)."""
    stacks: dict[int, list[Frame]] = {}
    current: dict[int, bool] = {}
    for line in output.splitlines():
        rank, text = unprefix(line)
        if rank is None:
            continue
        if text.startswith(("Current thread", "Thread ")):
            current[rank] = text.startswith("Current thread") and rank not in stacks
            if current[rank]:
                stacks[rank] = []
            continue
        frame = _FRAME.match(text)
        if frame and current.get(rank):
            stacks[rank].append(Frame(frame["path"], int(frame["line"]), frame["func"]))
    return stacks
