"""Elastic recovery on two simulated nodes (two torchrun agents on this host, c10d,
--max_restarts from launch/multi_node.sh): a worker on node 1 is killed mid-epoch, torchrun
restarts the group, training resumes from the last checkpoint and ends with exactly the
weights of an uninterrupted run. genie's ddp loop is killed three times and resumes from its
step checkpoints (every 3 steps under --smoke), mid-epoch, skipping the batches the epoch
trained; the HF Trainer resumes from its mid-epoch checkpoint (--eval-every 3: step 9) and
skips them too; Lightning resumes from its end-of-epoch checkpoint and replays the
interrupted epoch from its start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import elastic_group, report_of

STEP_LINE = re.compile(r"\] (step (\d+)/\d+ loss \S+ lr \S+)")


def steps_logged(*logs: str) -> dict[int, str]:
    """Step -> its log line (loss and LR) in ``logs``; a step trained again after a resume
    must log exactly what it logged the first time."""
    lines: dict[int, str] = {}
    for log in logs:
        for line, step in STEP_LINE.findall(log):
            assert lines.setdefault(int(step), line) == line, (line, lines[int(step)])
    return lines


pytestmark = pytest.mark.e2e
# What each framework logs when the restarted group resumes from the epoch-0 checkpoint.
RESUMED = {
    "ddp": "resumed from interrupted/last.pt at epoch 1, step 9",
    "lightning": "resuming from interrupted/last.ckpt",
    "hf": "resuming from interrupted/checkpoint-9",
}


def final_state(project: Path, framework: str, folder: str) -> tuple[int, dict, list]:
    """(optimizer steps, model weights, every rank's torch RNG state) of the last
    checkpoint a run in ``folder`` wrote."""
    import torch

    if framework in ("ddp", "lightning"):
        name, step, model = {
            "ddp": ("last.pt", "step", "model"),
            "lightning": ("last.ckpt", "global_step", "state_dict"),
        }[framework]
        state = torch.load(project / folder / name, map_location="cpu", weights_only=True)
        return state[step], state[model], [rank["torch"] for rank in state["rng"]]
    from safetensors.torch import load_file
    from transformers.trainer_utils import get_last_checkpoint

    newest = Path(get_last_checkpoint(str(project / folder)))
    rng = [torch.load(newest / f"rng_state_{rank}.pth", weights_only=False)["cpu"]
           for rank in (0, 1)]  # fmt: skip
    return int(newest.name.split("-")[1]), load_file(str(newest / "model.safetensors")), rng


@pytest.mark.parametrize(
    "framework", [pytest.param(f, marks=elastic_group(f)) for f in ("ddp", "lightning", "hf")]
)
def test_a_worker_killed_on_node_1_is_restarted_and_training_ends_bit_identical(
    elastic_runs, framework
):
    import torch

    run = elastic_runs(framework)
    log = "\n".join(node.stdout for node in run.nodes)
    assert [n.returncode for n in run.nodes] == [0, 0], log[-5000:]
    assert run.marker.exists(), "the fault never fired"
    assert re.search(r"GENIE_FAULT kill on rank \d at step 10", log)  # mid-epoch: steps 9-16
    assert RESUMED[framework] in log, log[-5000:]
    if framework == "ddp":  # also killed at steps 5 and 17: resumed from 3 and from 16
        assert run.marker.read_text().split() == ["5", "10", "17"]
        for step in (3, 9, 16):
            assert f"resuming from step {step} of interrupted/last.pt" in log
        # both nodes see its folder: global rank 0 alone prepared the data, once at each
        # start of the group (on per-node disks each node prepares: test_hosts_e2e.py)
        starts = log.count("data: interrupted/ is shared by all nodes: rank 0 prepares it")
        assert starts >= 4  # the first and three restarts
        straight = run.straight.stdout + run.straight.stderr  # in the same folder: one more
        assert "data: straight/ is shared by all nodes: rank 0 prepares it" in straight
        assert run.prepared == ["0"] * (starts + 1)
        # every step the restarted runs trained again logged the loss and LR it had before
        assert steps_logged(run.straight.stdout + run.straight.stderr) == steps_logged(
            run.straight.stdout + run.straight.stderr, log
        )
    if framework == "lightning":  # Lightning's own word that it restored the loop
        assert "Restoring states from the checkpoint path at interrupted/last.ckpt" in log
        # the training loader is resumable: no warning, and the restarted group began with
        # step 10, after the step-9 checkpoint (--save-every 3 under --smoke), mid-epoch
        assert "resuming from a checkpoint that ended before the epoch ended" not in log
        assert report_of(log)["first_step"] == 10
    # the restarted run's own smoke report: its checkpoints hold the weights it ended with
    # (Lightning's last.ckpt too, also when the last epoch is not among the best)
    resumed = report_of(log)
    assert resumed["checkpoint_loads"] is True and resumed["steps"] == 24
    straight = run.straight
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr
    # The restarted run's first step was step 17 (HF, Lightning: 10), not step 1 (a run
    # started afresh would end with the same weights too).
    assert resumed["first_loss"] != report_of(straight.stdout)["first_loss"]
    steps_a, a, rng_a = final_state(run.project, framework, "straight")
    steps_b, b, rng_b = final_state(run.project, framework, "interrupted")
    assert steps_a == steps_b == 24  # the last checkpoint is the end of training
    assert a.keys() == b.keys()
    for name, tensor in a.items():  # bit-identical on CPU
        assert torch.equal(tensor, b[name]), name
    assert len(rng_a) == len(rng_b) == 2
    for rank_a, rank_b in zip(rng_a, rng_b, strict=True):  # every rank's RNG too
        assert torch.equal(rank_a, rank_b)
