"""What an upgrade does to each file (pure): given what genie wrote then (the base, or only
its hashes for a project made before the base was kept), the user's files now, and what genie
writes today, one :class:`Step` per file that changes or needs a word.

- untouched by the user: replaced by genie's new version (or removed, if genie no longer
  writes it);
- changed by the user, with a base: merged three ways; a conflict is kept in the file with
  its markers;
- changed by the user, without a base (or the user's own file where genie now writes one):
  genie's version is written beside it as ``FILE.genie-new``, never merged blindly;
- deleted by the user: stays deleted unless genie changed it since (then ``.genie-new``);
- changed by the user and no longer written by genie: kept, and listed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from genie.upgrade.merge import merge3

SIDE_SUFFIX = ".genie-new"
ADD, REPLACE, MERGE, CONFLICT, SIDE, REMOVE, KEEP = (
    "add", "replace", "merge", "conflict", "side", "remove", "keep",
)  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One file's fate: ``kind`` (one of the constants above), the path written (``path``,
    or ``path + SIDE_SUFFIX`` for SIDE), its new content (None: nothing written), and the
    1-based lines of a CONFLICT's markers."""

    kind: str
    path: str
    content: bytes | None = None
    conflicts: tuple[int, ...] = ()

    @property
    def written(self) -> str:
        return self.path + SIDE_SUFFIX if self.kind == SIDE else self.path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan(
    ours: dict[str, bytes],
    theirs: dict[str, bytes],
    base: dict[str, bytes] | None,
    recorded: dict[str, str],
) -> list[Step]:
    """The steps that bring ``ours`` (the project's files genie wrote or writes now, as they
    are) to ``theirs``, keeping the user's edits. ``base``: the files as genie wrote them,
    None if the project did not keep them; ``recorded``: their sha256, from .genie.yml."""
    was_genies = set(base) if base is not None else set(recorded)
    steps = [_step(path, ours, theirs[path], base, recorded) for path in theirs]
    for path in sorted(was_genies - set(theirs)):
        if path in ours:
            untouched = _untouched(path, ours[path], base, recorded)
            steps.append(Step(REMOVE if untouched else KEEP, path))
    return [step for step in steps if step is not None]


def _untouched(path: str, data: bytes, base: dict[str, bytes] | None, recorded: dict) -> bool:
    """Whether the user's ``data`` is exactly what genie wrote at ``path``."""
    if base is not None:
        return base.get(path) == data
    return recorded.get(path) == sha256(data)


def _step(
    path: str,
    ours: dict[str, bytes],
    new: bytes,
    base: dict[str, bytes] | None,
    recorded: dict[str, str],
) -> Step | None:
    was_genies = path in base if base is not None else path in recorded
    if path not in ours:
        if not was_genies:
            return Step(ADD, path, new)
        if _untouched(path, new, base, recorded):
            return None  # genie writes what it wrote then: the user's deletion stands
        return Step(SIDE, path, new)
    mine = ours[path]
    if mine == new:
        return None
    if was_genies and _untouched(path, mine, base, recorded):
        return Step(REPLACE, path, new)
    if was_genies and _untouched(path, new, base, recorded):
        return None  # genie writes what it wrote then: the user's version stands
    if base is None or not was_genies:
        return Step(SIDE, path, new)
    try:
        texts = [data.decode("utf-8") for data in (base[path], mine, new)]
    except UnicodeDecodeError:
        return Step(SIDE, path, new)
    merged = merge3(*texts)
    if merged.text == texts[1]:
        return None  # genie changed nothing the user had not
    kind = CONFLICT if merged.conflicts else MERGE
    return Step(kind, path, merged.text.encode("utf-8"), merged.conflicts)
