"""genie's own code passes the linters and the type checker (one command runs every check)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "genie", "tests", "bench", "scripts"],
        ["black", "--check", "--quiet", "genie", "tests", "bench", "scripts"],
        ["mypy"],
    ],
    ids=["ruff", "black", "mypy"],
)
def test_genie_itself_is_clean(command):
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
