"""A smoke run that fails says which rank failed and why: faults injected with GENIE_FAULT
(honoured by the generated project in --smoke mode only)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time
from pathlib import Path

import pytest

from ..conftest import run_genie
from .conftest import CPU_ENV, WAITING_GROUP, generate

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("faults"))


def processes_of(project: Path) -> list[int]:
    """Every process still running in the project directory (torchrun, ranks)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry / "cwd")) == project:
                pids.append(int(entry.name))
    return pids


def smoke_with_fault(project: Path, fault: str, *args: str):
    result = run_genie("smoke", str(project), *args, GENIE_FAULT=fault, **CPU_ENV)
    assert processes_of(project) == []  # the whole tree is gone
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("raise:1", "rank 1 failed first: RuntimeError: GENIE_FAULT: rank 1 raised on purpose"),
        ("exit:1:3", "rank 1 failed first: exit code 3"),
        ("kill:0:2", "rank 0 failed first: killed by signal 9"),
    ],
)
def test_a_failing_rank_is_named_with_its_exception_or_exit(project, fault, named):
    result = smoke_with_fault(project, fault)
    assert result.returncode == 1
    assert named in result.stderr, result.stdout[-3000:] + result.stderr


@WAITING_GROUP  # the timeout's 30 s
def test_a_hanging_rank_is_named_and_the_whole_tree_killed_at_the_timeout(project):
    started = time.monotonic()
    result = smoke_with_fault(project, "hang:1", "--timeout", "30")  # no process left
    assert time.monotonic() - started < 75  # the timeout, not the hang, ended it
    assert result.returncode == 1
    assert "timed out after 30 s" in result.stderr
    assert "rank 1 hung outside any collective, at smoke_check.py" in result.stderr
    assert "rank 0 hung" not in result.stderr  # rank 0 only waited for it


def test_a_busy_default_port_does_not_break_the_single_node_smoke_test(project):
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("", 29500))
            busy.listen()
        except OSError as err:  # someone else holds it: busy either way
            assert err.errno == errno.EADDRINUSE
        result = run_genie("smoke", str(project), **CPU_ENV)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr


@pytest.mark.parametrize(
    ("framework", "task"), [("ddp", "custom"), ("lightning", "cv"), ("hf", "nlp")]
)
def test_a_broken_gradient_that_keeps_the_weights_in_sync_fails_the_learning_check(
    project, tmp_path, framework, task
):
    """grad:1:-1 negates rank 1's gradient before the average: the ranks stay identical, the
    model stops learning, and only the learning check can tell."""
    if framework != "ddp":
        project = generate(tmp_path, "--framework", framework, "--task", task, name="p")
    result = smoke_with_fault(project, "grad:1:-1")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "identical on all 2 ranks" in result.stdout  # in sync: that check passes
    assert "the model did not learn: the last epoch's mean loss" in result.stderr
