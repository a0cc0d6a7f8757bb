"""The first hour (issue 13): a generated project's own tests and launch script, as a
newcomer runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from genie import contract

from .conftest import CPU_ENV, THIS_PYTHON, generate

pytestmark = pytest.mark.e2e


def test_the_projects_pytest_works_inside_another_projects_tree(tmp_path):
    # Another project above it, with settings this project's pytest must never read.
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "-n auto --an-option-nobody-has"\n'
    )
    (tmp_path / "conftest.py").write_text("raise SystemExit('the outer conftest was read')\n")
    project = generate(tmp_path, name="demo")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"rootdir: {project}" in result.stdout or "2 tests collected" in result.stdout
    assert "2 tests collected" in result.stdout


def test_the_launch_script_runs_clean_and_ends_with_one_summary_line(tmp_path):
    project = generate(tmp_path, name="demo")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(CPU_ENV, **THIS_PYTHON)
    result = subprocess.run(
        ["bash", "launch/single_node.sh", "--smoke", "--checkpoint-dir", str(tmp_path / "ck"),
         "--log-dir", str(tmp_path / "runs")],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "OMP_NUM_THREADS" not in out  # torchrun's banner: the script sets it
    assert "\r" not in out  # no progress bar in a pipe, so nothing to glue onto
    lines = [x for x in result.stdout.splitlines() if contract.MARKER not in x and x.strip()]
    done = [x for x in lines if "] done: " in x]
    assert len(done) == 1 and done[0] == lines[-1], lines[-3:]
    assert "2/2 epochs, best validation accuracy" in done[0] and "at epoch" in done[0]
    assert f"checkpoints in {tmp_path / 'ck'}/" in done[0] and str(tmp_path / "runs") in done[0]
