"""The test harness itself: what the expensive shared fixtures rely on."""

from __future__ import annotations

import os

import pytest

from . import scheduling


@pytest.mark.xdist_group("harness")
def test_xdist_groups_reach_the_scheduler(request):
    """Tests that share a session fixture (the test SLURM, the separate hosts, one
    combination's runs) carry an xdist_group so that one worker makes it once. pytest-xdist
    sees the group only as an @suffix of the node id; where it cannot add one (pytest 9.2
    with xdist 3.8), every worker would start its own SLURM, with clashing job ports."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not run under pytest-xdist")
    if not request.config.getvalue("loadgroup"):  # what pytest-xdist sets for --dist loadgroup
        pytest.skip("not run with --dist loadgroup")
    assert request.node.nodeid.endswith("@harness"), request.node.nodeid


def _worker_and_niceness() -> tuple[str, int]:
    """This xdist worker's name and how much nicer it runs than the controller (its parent)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or int(os.environ["PYTEST_XDIST_WORKER_COUNT"]) < 3:
        pytest.skip("not run under pytest-xdist with 3 or more workers (-n auto on 2+ cores)")
    return worker, os.nice(0) - os.getpriority(os.PRIO_PROCESS, os.getppid())


@scheduling.waiting_group()
def test_the_waiting_tests_run_on_a_worker_of_their_own_at_the_controllers_priority():
    worker, nicer = _worker_and_niceness()
    assert (worker, nicer) == (scheduling.ASIDE, 0)


def test_the_other_tests_run_on_the_other_workers_a_nice_step_down():
    worker, nicer = _worker_and_niceness()
    assert worker != scheduling.ASIDE
    assert nicer == min(scheduling.NICENESS, 19 - os.getpriority(os.PRIO_PROCESS, os.getppid()))
