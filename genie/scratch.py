"""genie's temporary directories. Each name carries the process id, so the next genie can
remove what a killed one (SIGKILL, power loss) left behind: a directory whose process is gone."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"genie-(?P<kind>[a-z]+)-(?P<pid>\d+)-")


def directory(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for ``kind`` (render, smoke, nodes, check), after sweeping away
    the ones earlier genies that died left."""
    sweep()
    return tempfile.TemporaryDirectory(prefix=f"genie-{kind}-{os.getpid()}-")


def sweep() -> list[Path]:
    """Remove genie's temporary directories whose process no longer runs; return them."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob("genie-*-*-*"):
        found = _NAME.match(path.name)
        if found and path.is_dir() and not _alive(int(found["pid"])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and its files are not ours
        return True
    return True
