"""Writing a rendered project: all of it or none, and never over a file genie did not write."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from genie.errors import GenieError
from genie.generate.archive import ARCHIVE
from genie.generate.catalogue import EXECUTABLE
from genie.generate.pause import pause_point
from genie.i18n import _
from genie.spec.answers import ANSWERS_FILE, load_answers

STAGING_PREFIX = ".{name}.genie-"


def _previous_run(target: Path) -> dict[str, Any] | None:
    """The answers file a previous genie run left in ``target``, or None if there is none
    (or the file there is not genie's)."""
    path = target / ANSWERS_FILE
    if not path.is_file():
        return None
    try:
        answers = load_answers(path)
    except GenieError:
        return None
    return answers if "genie_version" in answers else None


def check_target(target: Path, force: bool) -> bool:
    """Refuse a target genie may not write to; True when it already holds files."""
    if target.exists() and not target.is_dir():
        raise GenieError(_("{t} exists and is not a directory; pick another path").format(t=target))
    if not target.is_dir() or not any(target.iterdir()):
        return False
    if force:
        return True
    if _previous_run(target) is not None:
        raise GenieError(
            _(
                "{t} is a genie project already; to write it again from its answers: genie new "
                "{t} --yes --answers {a} --force (files you changed are never overwritten)"
            ).format(t=target, a=target / ANSWERS_FILE)
        )
    raise GenieError(
        _(
            "{t} is not empty; pick a new directory, or pass --force to add genie's files "
            "(genie never deletes or overwrites files it did not write)"
        ).format(t=target)
    )


def _check_overwrites(target: Path, files: dict[str, bytes]) -> None:
    """Refuse to replace any file that genie did not write, or that was changed since."""
    previous = _previous_run(target)
    recorded = previous.get("files") if previous else None
    generated = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
    blocked = []
    for path, data in files.items():
        existing = target / path
        if not existing.exists() or (path in (ANSWERS_FILE, ARCHIVE) and previous is not None):
            continue
        if not existing.is_file():
            blocked.append(path)
            continue
        current = hashlib.sha256(existing.read_bytes()).hexdigest()
        if current != hashlib.sha256(data).hexdigest() and generated.get(path) != current:
            blocked.append(path)
    if blocked:
        raise GenieError(
            _(
                "--force will not overwrite files genie did not write (or you changed): {f}; "
                "move them away first"
            ).format(f=", ".join(sorted(blocked)))
        )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_stale_staging(target: Path) -> None:
    """Staging directories that a killed genie left next to ``target`` (their pid is gone)."""
    prefix = STAGING_PREFIX.format(name=target.name)
    for stale in target.parent.glob(prefix + "*"):
        pid = stale.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def write_project(target: Path, files: dict[str, bytes], force: bool = False) -> None:
    """Write ``files`` under ``target`` atomically: all of them, or (fresh target) none.

    The files are written into a staging directory next to ``target``, which is renamed into
    place in one step. With ``--force`` into a populated directory each file is replaced in
    one step and the answers file (with the hashes) last, so a run killed half way leaves
    whole files and a later ``--force`` finishes the job."""
    target = target.absolute()
    if check_target(target, force):
        _check_overwrites(target, files)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(target)
    prefix = STAGING_PREFIX.format(name=target.name) + f"{os.getpid()}-"
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the project should not be
    try:
        _stage(staging, files)
        pause_point("rename")
        if target.exists() and any(target.iterdir()):
            _replace_each(staging, target, files)
            return
        if target.exists():
            target.rmdir()
        os.rename(staging, target)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _stage(staging: Path, files: dict[str, bytes]) -> None:
    for i, (path, data) in enumerate(files.items()):
        dest = staging / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        if path in EXECUTABLE:
            dest.chmod(0o755)
        if i == len(files) // 2:
            pause_point("staging")
    _sync_tree(staging)


def _replace_each(staging: Path, target: Path, files: dict[str, bytes]) -> None:
    """--force into a populated directory: replace file by file, the answers file last."""
    for i, path in enumerate(sorted(files, key=lambda p: p == ANSWERS_FILE)):
        dest = target / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / path, dest)
        if i == len(files) // 2:
            pause_point("replace")
    _fsync_dir(target)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sync_tree(root: Path) -> None:
    """Every file and directory under ``root`` on disk before the rename publishes them."""
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        else:
            _fsync_dir(path)
    _fsync_dir(root)
