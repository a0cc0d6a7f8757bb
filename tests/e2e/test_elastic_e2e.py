"""Elastic recovery on two simulated nodes (two torchrun agents on this host, c10d,
--max_restarts from launch/multi_node.sh): a worker on node 1 is killed mid-epoch, torchrun
restarts the group, training resumes from the last checkpoint and ends with exactly the
weights of an uninterrupted run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import run_genie

pytestmark = pytest.mark.e2e
CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
EPOCHS = ("--epochs", "3")  # 7 optimizer steps an epoch with --smoke on 2 ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def test_a_worker_killed_on_node_1_is_restarted_and_training_ends_bit_identical(tmp_path):
    import torch

    host = socket.gethostname()
    result = run_genie(
        "new", "proj", "--yes", "--no-smoke", "--nodes", "2", "--nproc-per-node", "1",
        "--gpus-per-node", "0", "--master-addr", host, "--master-port", str(free_port()),
        "--rdzv", "c10d", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    project = tmp_path / "proj"
    env = {**os.environ, **CPU_ENV, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # Both nodes share the checkpoint directory, as on a shared filesystem.
    train = ["--smoke", *EPOCHS, "--checkpoint-dir", "interrupted"]
    marker = tmp_path / "fault-fired"
    faulty = {**env, "GENIE_FAULT": "kill:1:10", "GENIE_FAULT_MARKER": str(marker)}
    nodes = [
        subprocess.Popen(
            ["bash", "launch/multi_node.sh", str(rank), *train],
            cwd=project, env=faulty if rank == 1 else env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=400)[0] for node in nodes]
    log = "\n".join(outputs)
    assert [n.returncode for n in nodes] == [0, 0], log[-5000:]
    assert marker.exists(), "the fault never fired: node 1 did not hold rank 1"
    assert "GENIE_FAULT kill on rank 1 at step 10" in log  # mid-epoch: steps 8-14
    assert "resumed from interrupted/last.pt at epoch 1, step 7" in log

    straight = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "train.py", "--smoke", *EPOCHS, "--checkpoint-dir", "straight"],
        cwd=project, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr
    a = torch.load(project / "straight" / "last.pt", map_location="cpu", weights_only=True)
    b = torch.load(project / "interrupted" / "last.pt", map_location="cpu", weights_only=True)
    assert a["step"] == b["step"] == 21
    for name, tensor in a["model"].items():  # bit-identical on CPU
        assert torch.equal(tensor, b["model"][name]), name
    for rank_a, rank_b in zip(a["rng"], b["rng"]):
        assert torch.equal(rank_a["torch"], rank_b["torch"])
