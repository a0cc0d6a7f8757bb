"""Everything an upgrade needs, read and computed before anything is written: the project's
answers with the re-targeted ones over them, genie's new rendering, the base, the user's
files, and the plan."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.errors import GenieError
from genie.generate import archive
from genie.i18n import _
from genie.spec.answers import ANSWERS_FILE, load_answers
from genie.upgrade.plan import Step, plan

# Answers an upgrade may not change: a new framework or task is a new project.
FIXED = ("framework", "task")


@dataclass(frozen=True)
class Upgrade:
    """The steps for the user's files, and genie's own records (the answers file and the
    base archive), written last."""

    steps: list[Step]
    records: dict[str, bytes]


def answers(directory: Path, flags: Mapping[str, Any]) -> dict[str, Any]:
    """The project's answers with ``flags`` (the re-targeted ones) over them."""
    path = directory / ANSWERS_FILE
    if not path.is_file():
        raise GenieError(_("{f} not found: is {d} a genie project?").format(f=path, d=directory))
    recorded = load_answers(path)
    for name in FIXED:
        given = flags.get(name)
        if given is not None and str(given) != str(recorded.get(name)):
            raise GenieError(
                _(
                    "--{f} cannot change in an upgrade: that is a new project "
                    "(genie new DIR --{f} {v}, then move your code over)"
                ).format(f=name.replace("_", "-"), v=given)
            )
    given = {k: v for k, v in flags.items() if v is not None}
    kept = {k: v for k, v in recorded.items() if k not in ("files", "genie_version")}
    return {**kept, **given}


def prepare(directory: Path, new_files: dict[str, bytes]) -> Upgrade:
    """The plan that takes the project in ``directory`` to ``new_files`` (genie's rendering
    today), keeping the user's edits."""
    theirs = dict(new_files)
    records = {path: theirs.pop(path) for path in (ANSWERS_FILE, archive.ARCHIVE)}
    stored = directory / archive.ARCHIVE
    kept = archive.unpack(stored.read_bytes(), archive.ARCHIVE) if stored.is_file() else None
    recorded = _recorded_hashes(directory)
    paths = set(theirs) | set(kept if kept is not None else recorded)
    ours = {}
    for path in sorted(paths):
        where = directory / path
        if where.is_file() and not where.is_symlink():
            ours[path] = where.read_bytes()
        elif where.exists() or where.is_symlink():
            raise GenieError(
                _("{p} is not a plain file where genie writes one; move it away first").format(
                    p=where
                )
            )
    return Upgrade(plan(ours, theirs, kept, recorded), records)


def _recorded_hashes(directory: Path) -> dict[str, str]:
    files = load_answers(directory / ANSWERS_FILE).get("files")
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def uncommitted(directory: Path) -> list[str]:
    """The files git reports changed or untracked under ``directory`` (empty when it is not
    in a git work tree, or git is missing)."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all", "--", "."],
            cwd=directory,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return []
    if done.returncode != 0:  # not a git work tree
        return []
    return [line[3:] for line in done.stdout.splitlines() if line.strip()]
