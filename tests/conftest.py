from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Tests read genie's English messages, whatever language the machine running them speaks; the
# Chinese tests (tests/test_i18n.py) choose Chinese explicitly.
# LANGUAGE comes first in genie's (and gettext's) order.
os.environ["LANGUAGE"] = "en"

from genie.detect import Machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GENIE = [sys.executable, "-m", "genie"]


@pytest.fixture
def cpu_machine() -> Machine:
    """A machine with no GPU and torch 2.14 installed, whatever this one has."""
    return Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0.cluster")


@pytest.fixture
def gpu_machine() -> Machine:
    return Machine(gpus=8, torch="2.14.1", python="3.11", hostname="node0.cluster")


def run_genie(*args: str, cwd: Path | None = None, timeout: float = 600, **env: str):
    """Run the real ``python -m genie`` with no terminal and no colour."""
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **env}
    return subprocess.run(
        [*GENIE, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def project_code(files: dict[str, bytes]) -> str:
    """Every module of a generated project (not its tests) as one source to parse."""
    return "\n".join(
        data.decode().replace("from __future__ import annotations\n", "")
        for path, data in sorted(files.items())
        if path.endswith(".py") and not path.startswith("tests/")
    )
