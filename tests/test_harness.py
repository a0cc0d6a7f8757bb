"""The test harness itself: what the expensive shared fixtures rely on."""

from __future__ import annotations

import os

import pytest


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
