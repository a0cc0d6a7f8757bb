"""A three-way merge of one text file, line by line (pure).

``base`` is what genie wrote, ``ours`` the user's file now, ``theirs`` what genie writes
today. Regions where all three agree are kept; between them, a side that left the base as
it was takes the other side's change, equal changes are taken once, and changes that differ
become a conflict in the usual form::

    <<<<<<< yours
    the user's lines
    =======
    genie's lines
    >>>>>>> genie

Lines the two changed sides share at a conflict's start or end are kept outside it, so a
conflict holds only lines both sides changed differently. Nothing of ``ours`` is dropped
unless the base had it and ``theirs`` kept it as it was (the user's deletion stands).
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

OURS_LABEL, THEIRS_LABEL = "yours", "genie"


@dataclass(frozen=True)
class Merged:
    """The merged text, and the 1-based line of each conflict's ``<<<<<<<`` in it."""

    text: str
    conflicts: tuple[int, ...]


def merge3(base: str, ours: str, theirs: str) -> Merged:
    """Merge the change from ``base`` to ``theirs`` into ``ours``."""
    b, o, t = (text.splitlines(keepends=True) for text in (base, ours, theirs))
    out: list[str] = []
    conflicts: list[int] = []
    ib = io = it = 0
    for bs, be, os_, ts in [*_sync_regions(b, o, t), (len(b), len(b), len(o), len(t))]:
        _merge_chunk(b[ib:bs], o[io:os_], t[it:ts], out, conflicts)
        out.extend(b[bs:be])
        ib, io, it = be, os_ + (be - bs), ts + (be - bs)
    return Merged("".join(out), tuple(conflicts))


def _matches(a: list[str], b: list[str]) -> list[tuple[int, int, int]]:
    """(start in a, start in b, length) of each block of equal lines, in order."""
    blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return [(m.a, m.b, m.size) for m in blocks if m.size]


def _sync_regions(b: list[str], o: list[str], t: list[str]) -> list[tuple[int, int, int, int]]:
    """(base start, base end, start in ours, start in theirs) of each region the three
    files share: where a block ours keeps overlaps a block theirs keeps."""
    regions = []
    with_ours, with_theirs = _matches(b, o), _matches(b, t)
    i = j = 0
    while i < len(with_ours) and j < len(with_theirs):
        b1, o1, n1 = with_ours[i]
        b2, t2, n2 = with_theirs[j]
        start, end = max(b1, b2), min(b1 + n1, b2 + n2)
        if start < end:
            regions.append((start, end, o1 + start - b1, t2 + start - b2))
        if b1 + n1 < b2 + n2:
            i += 1
        else:
            j += 1
    return regions


def _merge_chunk(
    base: list[str], ours: list[str], theirs: list[str], out: list[str], conflicts: list[int]
) -> None:
    """Append the merge of one unstable chunk (the lines between two shared regions)."""
    if ours == base or ours == theirs:
        out.extend(theirs)
        return
    if theirs == base:
        out.extend(ours)
        return
    head = 0  # lines both sides changed alike, kept outside the conflict
    while head < min(len(ours), len(theirs)) and ours[head] == theirs[head]:
        head += 1
    tail = 0
    while (
        tail < min(len(ours), len(theirs)) - head
        and ours[len(ours) - 1 - tail] == theirs[len(theirs) - 1 - tail]
    ):
        tail += 1
    out.extend(ours[:head])
    conflicts.append(len(out) + 1)
    out.append(f"<<<<<<< {OURS_LABEL}\n")
    out.extend(_ended(ours[head : len(ours) - tail]))
    out.append("=======\n")
    out.extend(_ended(theirs[head : len(theirs) - tail]))
    out.append(f">>>>>>> {THEIRS_LABEL}\n")
    out.extend(ours[len(ours) - tail :])


def _ended(lines: list[str]) -> list[str]:
    """``lines`` with the last one ending in a newline (a file's last line may not)."""
    if lines and not lines[-1].endswith("\n"):
        return [*lines[:-1], lines[-1] + "\n"]
    return lines
