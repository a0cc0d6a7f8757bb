"""genie explain on real logs: each recorded on two separate hosts (network namespaces) by
tests/explain_logs/record.py, as a user met it. A run that ended well gets no diagnosis; a
rank whose peer died is told so, not to fix its code."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.smoke.signatures import ended, explain

from .conftest import run_genie

LOGS = Path(__file__).parent / "explain_logs"
# log -> (genie explain's exit status, what its report must say first)
CORPUS = {
    "success-node0.log": (0, "The run ended normally (torchrun exited 0 on node0)"),
    "success-node1.log": (0, "The run ended normally (torchrun exited 0 on node1)"),
    # node 1's host SIGKILLed mid-run: node 0's rank fails in gloo, and that is the news
    "peer-killed-node0.log": (0, "the process at 10.77.0.2 went away mid-run"),
    # the same, node 1 never back: node 0's torchrun gave up waiting (RDZV_TIMEOUT=20)
    "peer-never-back-node0.log": (0, "the process at 10.77.0.2 went away mid-run"),
}


def test_every_recorded_log_is_in_the_table():
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(CORPUS)


@pytest.mark.parametrize("name", list(CORPUS))
def test_each_recorded_log_gets_its_verdict(name):
    status, first = CORPUS[name]
    result = run_genie("explain", str(LOGS / name))
    said = " ".join(result.stdout.split())
    assert result.returncode == status, said
    assert said.startswith(first) or said.startswith("Likely cause • " + first), said
    assert "fix that code" not in said and "never met" not in said


def test_nodes_that_trained_together_and_lost_one_are_not_told_they_never_met():
    said = " ".join(run_genie("explain", str(LOGS / "peer-never-back-node0.log")).stdout.split())
    lost, gone = said.index("went away mid-run"), said.index("had trained together, then lost")
    assert lost < gone and "exited 0" not in said


def test_a_successful_runs_known_noise_is_called_harmless():
    said = " ".join(run_genie("explain", str(LOGS / "success-node1.log")).stdout.split())
    assert "The hostname of the client socket cannot be retrieved' is harmless" in said


def test_the_first_cause_in_the_log_comes_first():
    """Read in time order: a peer lost, then (later, its fallout) the store gone."""
    log = ("Read error [10.0.0.2]:4321: Connection reset by peer\n"
           "Failed to recv, got 0 bytes. Connection was likely closed\n")  # fmt: skip
    assert [e.id for e in explain(log, 1)] == ["peer_lost", "store_closed"]
    assert [e.id for e in explain("".join(reversed(log.splitlines(True))), 1)] == [
        "store_closed", "peer_lost"]  # fmt: skip


def test_only_the_launch_scripts_last_word_counts():
    assert ended("launch: torchrun on n1 exited 1\nlaunch: torchrun on n1 exited 0\n") == ("n1", 0)
    assert ended("[rank0]: launch: torchrun on n1 exited 0\n") == ("n1", 0)  # torchrun's prefix
    assert ended("echo launch: torchrun on n1 exited 0\n") is None


def test_a_rank_that_raised_is_the_cause_not_the_peers_it_left():
    """Rank 1 raised; rank 0 then lost its peer in gloo: the raise is the news."""
    log = ("[rank1]: ValueError: injected failure\n"
           "[rank0]: RuntimeError: [pair.cc:561] Connection closed by peer [10.0.0.2]:1234\n")  # fmt: skip
    assert [e.cause for e in explain(log, 1)] == ["a rank raised ValueError: injected failure"]
    assert [e.id for e in explain(log.splitlines(True)[1], 1)] == ["peer_lost"]
