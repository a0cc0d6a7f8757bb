"""Planning the simulated nodes is pure: which nodes, which commands, which environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.detect import Machine
from genie.smoke import node_report
from genie.smoke import nodes as smoke_nodes
from genie.smoke.process import JobOutcome

from .conftest import spec_of


def two_nodes(machine: Machine, **answers):
    """A 2-node project (unless the answers say otherwise)."""
    return spec_of(machine, **{"nodes": 2, "master_addr": "node0.example", **answers})


@pytest.mark.parametrize(
    ("nodes", "gpus", "expected"),
    [(2, 0, (2, 2, False)), (3, 0, (3, 1, False)), (16, 0, (4, 1, False)),
     (2, 8, (2, 4, True)), (8, 8, (4, 2, True)), (2, 1, (2, 2, False))],
)  # fmt: skip
def test_simulated_nodes_fit_this_machine(nodes, gpus, expected):
    machine = Machine(gpus=gpus, torch="2.14.1", python="3.11", hostname="h")
    spec = two_nodes(Machine(gpus=8, torch="2.14.1", python="3.11", hostname="h"), nodes=nodes)
    assert smoke_nodes.shape(spec, machine) == expected


def test_each_node_runs_the_projects_script_in_its_own_copy(cpu_machine, tmp_path):
    spec = two_nodes(cpu_machine, gpus_per_node=0)
    p = smoke_nodes.plan(spec, cpu_machine, tmp_path, port=41000)
    assert [n.argv[:3] for n in p.nodes] == [
        ("bash", "launch/multi_node.sh", "0"), ("bash", "launch/multi_node.sh", "1")
    ]  # fmt: skip
    assert len({n.cwd for n in p.nodes}) == 2 and all(n.cwd.parent == tmp_path for n in p.nodes)
    for node in p.nodes:
        assert node.env["MASTER_ADDR"] == "127.0.0.1" and node.env["MASTER_PORT"] == "41000"
        assert (node.env["NNODES"], node.env["NPROC_PER_NODE"]) == ("2", "2")
        assert (
            "--smoke" in node.argv
            and str(node.cwd) in node.argv[node.argv.index("--checkpoint-dir") + 1]
        )
    assert p.nproc == 4 and p.backend == "gloo"


def test_gpus_are_split_across_the_simulated_nodes(gpu_machine, tmp_path):
    p = smoke_nodes.plan(two_nodes(gpu_machine), gpu_machine, tmp_path, port=1)
    assert [n.env["CUDA_VISIBLE_DEVICES"] for n in p.nodes] == ["0,1,2,3", "4,5,6,7"]
    assert p.backend == "nccl" and p.nproc == 8


def outcome(rc, lines=(), children=True, stopped=False, timed_out=False):
    return JobOutcome(rc, list(lines), 1.0, timed_out, children, stopped)


def test_the_verdict_names_the_node_of_a_failing_rank_and_a_node_that_never_joined(
    cpu_machine, tmp_path
):
    p = smoke_nodes.plan(two_nodes(cpu_machine, gpus_per_node=0), cpu_machine, Path("/x"), port=1)
    failed = ["Root Cause (first observed failure):\n", "  rank      : 3 (local_rank: 1)\n"]
    problems = node_report.node_problems(p, [outcome(0), outcome(1, failed)], timeout=9)
    assert problems == ["rank 3 failed on node 1", "node 1: torchrun exited with 1"]
    problems = node_report.node_problems(
        p, [outcome(None, stopped=True, timed_out=True), outcome(1, children=False)], timeout=9
    )
    assert problems[0] == "timed out after 9 s; every process of every node was killed"
    assert any(x.startswith("node 1 never joined") for x in problems)


def test_the_rank_that_failed_first_is_told_apart_from_the_ranks_it_took_down(cpu_machine):
    p = smoke_nodes.plan(two_nodes(cpu_machine, gpus_per_node=0), cpu_machine, Path("/x"), port=1)
    node0 = ["Root Cause (first observed failure):\n", "[0]:\n", "  time      : 2026-12-01_11:07:11\n",
             "  rank      : 0 (local_rank: 0)\n"]  # fmt: skip
    node1 = ["[rank3]: Traceback (most recent call last):\n",
             "[rank3]: RuntimeError: injected failure\n",
             "  time      : 2026-12-01_11:07:10\n", "  rank      : 2 (local_rank: 0)\n",
             "Root Cause (first observed failure):\n", "  time      : 2026-12-01_11:07:09\n",
             "  rank      : 3 (local_rank: 1)\n"]  # fmt: skip
    problems = node_report.node_problems(p, [outcome(1, node0), outcome(1, node1)], timeout=9)
    assert problems[:2] == [
        "rank 3 failed on node 1: RuntimeError: injected failure",
        "then rank(s) 2, 0 failed (node(s) 0, 1)",
    ]


def test_after_a_passed_preflight_the_job_does_not_meet_again(cpu_machine, tmp_path, monkeypatch):
    """The preflight's meet has just seen every node: the job starts torchrun at once
    (JOIN_WAIT=0, launch/multi_node.sh's documented skip); a preflight run still meets."""
    seen: list[tuple[tuple[str, ...], list[dict[str, str]]]] = []
    passed = f'{smoke_nodes.preflight.MARKER}{{"ok": true, "fails": [], "warns": []}}\n'

    def execute(p, options, *args):
        seen.append((args, [node.env for node in p.nodes]))
        return [outcome(0, [passed] if args else []) for _ in p.nodes]

    monkeypatch.setattr(smoke_nodes, "_execute", execute)
    project = tmp_path / "proj"
    project.mkdir()
    spec = two_nodes(cpu_machine, gpus_per_node=0)
    options = smoke_nodes.RunOptions(cpu_machine)
    smoke_nodes._run(spec, project, options, "127.0.0.1", (), None)
    (preflight_args, before), (job_args, during) = seen
    assert preflight_args == ("--preflight",) and job_args == ()
    assert all("JOIN_WAIT" not in env for env in before)
    assert [env["JOIN_WAIT"] for env in during] == ["0", "0"]
