"""Real training under torchrun: 2 CPU processes with gloo (all GPUs with NCCL where present)."""

from __future__ import annotations

import pytest

from ..conftest import run_genie
from .conftest import CPU_ENV, combo_group, elastic_group, generate, inject, report_of, torchrun

pytestmark = pytest.mark.e2e


@combo_group("ddp-custom")
def test_genie_new_yes_generates_and_really_trains_on_two_processes(combo_runs):
    """`genie new NAME --yes` alone (the ddp-custom combination's run)."""
    made = combo_runs("ddp-custom")
    result = made.new
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    report = report_of(result.stdout)
    assert report["world_size"] == 2 and report["backend"] == "gloo"
    assert report["params_in_sync"] is True and report["steps"] >= 8
    assert "[default0]:" in result.stdout  # rank output streams live, prefixed by rank
    assert "[rank 0]" in result.stdout and "[rank 1]" not in result.stdout  # rank 0 logs alone
    assert "PASS" in result.stdout
    # and again on the existing project
    again = run_genie("smoke", made.project.name, cwd=made.project.parent, **CPU_ENV)
    assert again.returncode == 0 and "PASS" in again.stdout


def test_a_project_planned_for_gpus_and_fp16_is_tested_on_what_this_machine_has(tmp_path):
    project = generate(tmp_path, "--gpus-per-node", "8", "--precision", "fp16", "--grad-accum", "3")
    result = run_genie("smoke", str(project), **CPU_ENV)
    assert result.returncode == 0, result.stdout[-3000:]
    report = report_of(result.stdout)
    assert (report["world_size"], report["device"], report["precision"]) == (2, "cpu", "bf16")
    assert "fp16 needs CUDA: tested bf16 on CPU" in result.stdout


def test_smoke_fails_when_a_rank_raises(tmp_path):
    project = generate(tmp_path)
    inject(project, "    dist_utils.seed_all(args.seed)  # the same initial weights on every rank\n",
           '    if dist.get_rank() == 1:\n        raise RuntimeError("injected failure")\n')  # fmt: skip
    result = run_genie("smoke", str(project), **CPU_ENV)
    assert result.returncode == 1
    assert "smoke test failed: rank 1 failed first: RuntimeError: injected failure" in (
        result.stderr
    )
    assert "torchrun exited with 1" in result.stderr
    assert "injected failure" in result.stdout


def test_smoke_fails_when_parameters_diverge_across_ranks(tmp_path):
    project = generate(tmp_path)
    inject(project, "            smoke_check.check_run(",
           "            if dist.get_rank() == 1:\n                with torch.no_grad():\n"
           "                    next(run.model.parameters()).add_(1.0)\n")  # fmt: skip
    result = run_genie("smoke", str(project), **CPU_ENV)
    assert result.returncode == 1
    assert "parameters differ across ranks after training" in result.stderr


def test_training_resumes_model_optimizer_epoch_and_step(tmp_path):
    project = generate(tmp_path, "--batch-size", "64")
    base = ["--num-workers", "0", "--checkpoint-dir", "ck"]
    first = torchrun(project, *base, "--epochs", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    import torch

    state = torch.load(project / "ck" / "last.pt", weights_only=True)
    # 8192 samples, 819 held out: 7373 / 2 ranks = 3687 (padded) / 64 -> 57 whole batches
    assert (state["epoch"], state["step"]) == (0, 57)
    keys = {"model", "optimizer", "scaler", "scheduler", "rng", "epoch", "step", "best",
            "batches", "config"}  # fmt: skip
    assert set(state) == keys and len(state["rng"]) == 2  # every rank's RNG state
    # how it was made: the parsed arguments and genie's answers
    assert state["config"]["args"]["epochs"] == 1 and state["config"]["args"]["batch_size"] == 64
    assert 'framework: "ddp"' in state["config"]["genie"]
    # the LR schedule it followed: 57 steps
    assert state["scheduler"]["lr_lambdas"][0]["end"] == 57
    assert state["optimizer"]["state"], "optimizer moments must be saved"
    second = torchrun(project, *base, "--epochs", "2", "--resume", "--schedule-change", "continue")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resumed from ck/last.pt at epoch 1, step 57" in second.stdout
    state = torch.load(project / "ck" / "last.pt", weights_only=True)
    assert (state["epoch"], state["step"]) == (1, 114)
    assert state["scheduler"]["last_epoch"] == 114  # the LR schedule went on, not restarted
    assert not list((project / "ck").glob("*.tmp"))


def test_resume_without_a_checkpoint_says_so(tmp_path):
    project = generate(tmp_path)
    result = torchrun(project, "--smoke", "--resume", "--checkpoint-dir", "none")
    assert (
        result.returncode != 0
        and "--resume: no checkpoint at none/last.pt" in result.stdout + result.stderr
    )


@elastic_group("ddp")
def test_multi_node_script_trains_across_two_nodes_on_this_host_with_c10d(elastic_runs):
    """Two 'nodes' (two torchrun agents) on this host, each with one process, started by
    launch/multi_node.sh with the c10d rendezvous: the elastic run's (its worker on node 1
    killed and restarted on the way, test_elastic_e2e.py)."""
    run = elastic_runs("ddp")
    assert [n.returncode for n in run.nodes] == [0, 0], run.nodes[0].stdout[-3000:]
    report = report_of("\n".join(n.stdout for n in run.nodes))
    assert report["world_size"] == 2 and report["params_in_sync"] is True


# Two 'nodes' with the static rendezvous train through launch/multi_node.sh in
# test_multinode_e2e.py (2 x 2 processes, each node on a host of its own); a run
# interrupted mid-epoch and resumed ends bit for bit where an uninterrupted one ends in
# test_long_runs_e2e.py (a kill before every step of an epoch, weights and RNG compared).


def test_a_chosen_tracker_that_is_not_installed_is_named_with_the_fix(tmp_path):
    from importlib.util import find_spec

    if find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    result = run_genie("new", "p", "--yes", "--tracker", "wandb", cwd=tmp_path, **CPU_ENV)
    assert result.returncode == 1
    assert f"lacks wandb: pip install -r {tmp_path / 'p' / 'requirements.txt'}" in result.stderr
    assert "wandb>=" in (tmp_path / "p" / "requirements.txt").read_text()
    # and train.py itself, run without genie, says the same in one line
    run = torchrun(tmp_path / "p", "--smoke", "--checkpoint-dir", "ck", nproc=1)
    assert run.returncode != 0
    assert "--tracker wandb: wandb is not installed; pip install wandb, or pass --tracker none" in (
        run.stdout + run.stderr
    )


def test_max_grad_norm_zero_turns_clipping_off_instead_of_zeroing_gradients(tmp_path):
    """--max-grad-norm 0 means "no clipping" (as in Lightning and HF): it must train exactly
    like a bound no gradient reaches, not scale every gradient by 0."""
    import torch

    project = generate(tmp_path)

    def final_weights(norm: str) -> dict:
        done = torchrun(project, "--smoke", "--tracker", "none", "--max-grad-norm",
                        norm, "--checkpoint-dir", f"ck-{norm}", nproc=1)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return torch.load(project / f"ck-{norm}" / "last.pt", weights_only=True)["model"]

    off, unreachable, tight = final_weights("0"), final_weights("1e9"), final_weights("1e-3")
    assert all(torch.equal(off[name], unreachable[name]) for name in off)
    assert not all(torch.equal(off[name], tight[name]) for name in off)  # clipping still works
