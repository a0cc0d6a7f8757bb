"""Writing an upgrade: all of it or none of it.

Every new file is first written under ``.genie/upgrade/`` in the project, then a list of the
moves (``MOVES``) is written there in one step: that is the commit. Only then are the files
moved into place, each with one rename, and the files genie removes deleted. A genie killed
before the commit leaves the project as it was (the next run discards the half-written
staging); killed after it, the project holds whole files, old or new, and the next
``genie upgrade`` finishes the moves before anything else.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from genie.generate.catalogue import EXECUTABLE
from genie.generate.pause import pause_point
from genie.i18n import N_
from genie.upgrade.plan import REMOVE, Step

STAGING = ".genie/upgrade"
MOVES = "MOVES.json"
INTERRUPTED = N_("an upgrade of {d} was interrupted; run genie upgrade {d} to finish it")


def interrupted(directory: Path) -> bool:
    """Whether a killed genie left a committed upgrade of ``directory`` half done."""
    return (directory / STAGING / MOVES).is_file()


def write(directory: Path, steps: list[Step], records: dict[str, bytes]) -> None:
    """Apply ``steps``, then write genie's ``records`` (answers file and base) last."""
    staging = directory / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    moves: list[list[str]] = []
    staged = [(s.written, s.content) for s in steps if s.content is not None]
    for i, (path, data) in enumerate([*staged, *records.items()]):
        dest = staging / "files" / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        if path in EXECUTABLE:
            dest.chmod(0o755)
        elif (directory / path).is_file():  # keep the mode the user gave the file
            dest.chmod((directory / path).stat().st_mode & 0o777)
        _fsync(dest)
        moves.append([f"files/{path}", path])
        if i == len(staged) // 2:
            pause_point("staging")
    removes = [s.path for s in steps if s.kind == REMOVE]
    journal = staging / (MOVES + ".tmp")
    journal.write_text(json.dumps({"moves": moves, "removes": removes}))
    _fsync(journal)
    os.replace(journal, staging / MOVES)  # the commit
    pause_point("rename")
    finish(directory)


def finish(directory: Path) -> bool:
    """Finish an upgrade a killed genie committed, or drop one it had not; True if there
    was one to finish."""
    staging = directory / STAGING
    if not staging.exists():
        return False
    journal = staging / MOVES
    if not journal.is_file():
        shutil.rmtree(staging, ignore_errors=True)  # never committed: the project is as it was
        return False
    todo = json.loads(journal.read_text())
    for i, (source, path) in enumerate(todo["moves"]):
        if (staging / source).exists():  # not moved yet
            (directory / path).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / source, directory / path)
        if i == len(todo["moves"]) // 2:
            pause_point("replace")
    for path in todo["removes"]:
        (directory / path).unlink(missing_ok=True)
    _fsync(directory)
    shutil.rmtree(staging)
    return True


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
