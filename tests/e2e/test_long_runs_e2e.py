"""Long runs: a run stopped by a preemption signal checkpoints at a step, and the next start
resumes there and ends bit-identical to an uninterrupted run (genie's own loop, ddp, with
the same loss and learning rate at every step; the Hugging Face Trainer; Lightning, stopped
by SIGTERM to torchrun too, as Kubernetes stops a pod); a resume that
would change the LR schedule's length stops with one line; a worker killed before every step
of an epoch, in turn, resumes each time and ends the same. (Kills on two simulated nodes:
test_elastic_e2e.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import TORCHRUN
from .conftest import (
    CPU_ENV,
    ELASTIC_TRAINING,
    THIS_PYTHON,
    WAITING_GROUP,
    elastic_group,
    generate,
    report_of,
)
from .test_elastic_e2e import final_state, steps_logged

pytestmark = pytest.mark.e2e  # the straight runs are elastic_runs'
# The ranks vote on a stop signal after every optimizer step (by default about every 0.5 s):
# a signal during step 5 stops them after step 6
EVERY_STEP = {"GENIE_STOP_VOTE_SECONDS": "0"}


def start(project: Path, env: dict, folder: str, *extra: str, fault: str = "",
          restarts: int = 0) -> subprocess.Popen:  # fmt: skip
    """A 2-process --smoke run under torchrun, started in the background (output merged)."""
    return subprocess.Popen(
        [*TORCHRUN, "--standalone", "--nproc_per_node=2", f"--max_restarts={restarts}",
         "train.py", "--smoke", *ELASTIC_TRAINING, "--checkpoint-dir", folder, *extra],
        cwd=project, env={**env, "GENIE_FAULT": fault} if fault else env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen) -> tuple[int, str]:
    """Its exit code and the rest of its output (read while it runs: a full pipe blocks it)."""
    output, _ = process.communicate(timeout=400)
    return process.returncode, output


def assert_same_end(project: Path, folder: str, framework: str = "ddp") -> None:
    import torch

    steps_a, a, rng_a = final_state(project, framework, "straight")
    steps_b, b, rng_b = final_state(project, framework, folder)
    assert steps_a == steps_b == 24
    for name, tensor in a.items():  # bit-identical on CPU
        assert torch.equal(tensor, b[name]), name
    for rank_a, rank_b in zip(rng_a, rng_b, strict=True):
        assert torch.equal(rank_a, rank_b)


@elastic_group("ddp")
def test_a_preempted_run_checkpoints_at_a_step_exits_75_and_the_next_start_resumes(elastic_runs):
    """SIGUSR1 on every rank during step 5: the ranks' vote on it (started after step 5,
    read after step 6) stops them after step 6; then SIGTERM to torchrun (as Kubernetes
    sends it), which passes it on to its workers; then a plain start: it resumes, with no
    --resume, and ends as the uninterrupted run ends."""
    run = elastic_runs("ddp")
    straight = run.straight.stdout + run.straight.stderr
    code, first = finish(start(run.project, run.env | EVERY_STEP, "preempted", fault="usr1:*:5"))
    assert code != 0 and "exitcode  : 75" in first, first[-5000:]
    assert "SIGUSR1: stopped at step 6, checkpoint written to preempted/last.pt" in first
    assert (run.project / "preempted" / "PREEMPTED").exists()
    # the default vote cadence, about every 0.5 s: 0.1 s steps vote every few steps
    second = start(run.project, run.env, "preempted", fault="slow:*:0.1")
    seen = ""
    assert second.stdout is not None
    for line in second.stdout:  # let it train a few steps, then stop it as a cluster would
        seen += line
        if "step 9/" in line:
            second.send_signal(signal.SIGTERM)
            break
    code, rest = finish(second)
    seen += rest
    # torchrun signals its workers one after the other: rank 0 may learn of it from rank 1
    stopped = re.search(r"(?:SIGTERM|another rank's signal): stopped at step (\d+)", seen)
    assert code != 0 and stopped, seen[-5000:]
    assert "resuming from step 6 of preempted/last.pt" in seen
    code, third = finish(start(run.project, run.env, "preempted"))
    assert code == 0, third[-5000:]
    assert f"resuming from step {stopped[1]} of preempted/last.pt" in third
    assert not (run.project / "preempted" / "PREEMPTED").exists()
    assert steps_logged(straight) == steps_logged(straight, first, seen, third)
    assert report_of(third)["steps"] == 24
    assert_same_end(run.project, "preempted")


@elastic_group("ddp")
def test_a_kill_at_every_step_of_an_epoch_and_the_next_resumes_to_the_same_end(
    elastic_runs, tmp_path
):
    """Rank 1 killed before each of steps 1 to 9 (the first epoch and the next one's first
    step), torchrun restarting the group each time: every restart resumes from the newest
    step checkpoint (every 3 steps, and the epoch's end at 8) or, before step 3, starts
    afresh; every step trained again logs the loss and LR it logged before, and the run
    ends bit-identical to the uninterrupted one."""
    run = elastic_runs("ddp")
    marker = tmp_path / "fired"
    kills = [str(step) for step in range(1, 10)]
    # as launch/single_node.sh sets it: with the store torchrun shares across restarts, a
    # restarted group failed ("Gloo connectFullMesh failed ... Connection refused" on 2 of 9
    # restarts) or hung in init_process_group (measured with a 30-line script, no genie)
    env = {**run.env, "GENIE_FAULT_MARKER": str(marker), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    process = start(run.project, env, "every", fault=f"kill:1:{','.join(kills)}", restarts=9)
    code, log = finish(process)
    assert code == 0, log[-5000:]
    assert marker.read_text().split() == kills
    resumed = re.findall(r"resuming from step (\d+) of every/last\.pt", log)
    assert sorted(resumed) == ["3", "3", "3", "6", "6", "8"], log[-5000:]  # kills 4 to 9
    straight = run.straight.stdout + run.straight.stderr
    assert steps_logged(straight) == steps_logged(straight, log)
    assert report_of(log)["steps"] == 24
    assert_same_end(run.project, "every")


@elastic_group("hf")
def test_a_preempted_hugging_face_run_saves_at_the_step_and_the_next_start_resumes(
    elastic_runs,
):
    """SIGUSR1 on rank 1 alone during step 5: both ranks stop after step 6 (they agree, a
    step later), the Trainer saves checkpoint-6 and the processes exit 75; a plain start resumes
    there, mid-epoch, and ends with the weights and RNG states of the uninterrupted run."""
    run = elastic_runs("hf")
    code, first = finish(start(run.project, run.env | EVERY_STEP, "preempted", fault="usr1:1:5"))
    # the ranks exit 75 after the checkpoint; torchrun stops one still shutting down
    # once it sees the first exit (SIGTERM: -15)
    codes = re.findall(r"exitcode\s*: (-?\d+)", first)
    assert code != 0 and "75" in codes and set(codes) <= {"75", "-15"}, first[-5000:]
    said = "another rank's signal: stopped at step 6, checkpoint written to preempted/checkpoint-6"
    assert said in first, first[-5000:]  # rank 0 heard of it from rank 1
    assert (run.project / "preempted" / "PREEMPTED").exists()
    code, second = finish(start(run.project, run.env, "preempted"))
    assert code == 0, second[-5000:]
    assert "resuming from preempted/checkpoint-6" in second
    assert not (run.project / "preempted" / "PREEMPTED").exists()
    assert report_of(second)["steps"] == 24
    assert_same_end(run.project, "preempted", "hf")


@elastic_group("lightning")
def test_a_preempted_lightning_run_saves_at_the_step_and_the_next_start_resumes(elastic_runs):
    """SIGUSR1 on rank 1 alone during step 5: both ranks write last.ckpt after step 6 (the
    vote is read a step later) and exit 75. A plain start resumes there; once it has trained a step, SIGTERM to torchrun
    (as Kubernetes stops a pod), which passes it on: last.ckpt at the next step, exit 75.
    A third start resumes from that step and ends with the weights and every rank's RNG
    state of the uninterrupted run."""
    run = elastic_runs("lightning")
    last, marker = run.project / "preempted" / "last.ckpt", run.project / "preempted" / "PREEMPTED"
    code, first = finish(start(run.project, run.env | EVERY_STEP, "preempted", fault="usr1:1:5"))
    codes = re.findall(r"exitcode\s*: (-?\d+)", first)
    assert code != 0 and "75" in codes and set(codes) <= {"75", "-15"}, first[-5000:]
    said = "another rank's signal: stopped at step 6, checkpoint written to preempted/last.ckpt"
    assert said in first, first[-5000:]  # rank 0 heard of it from rank 1
    assert marker.exists()
    second = start(run.project, run.env, "preempted", fault="slow:*:0.3")
    seen, saved = "", last.stat().st_mtime_ns
    assert second.stdout is not None
    for line in second.stdout:
        seen += line
        if "resuming from preempted/last.ckpt" in line:
            break
    deadline = time.monotonic() + 120
    while last.stat().st_mtime_ns == saved and time.monotonic() < deadline:
        time.sleep(0.1)  # training is under way once it wrote its first step checkpoint
    second.send_signal(signal.SIGTERM)
    code, rest = finish(second)
    seen += rest
    stopped = re.search(r"(?:SIGTERM|another rank's signal): stopped at step (\d+)", seen)
    assert code != 0 and stopped and marker.exists(), seen[-5000:]
    code, third = finish(start(run.project, run.env, "preempted"))
    assert code == 0 and "resuming from preempted/last.ckpt" in third, third[-5000:]
    assert not marker.exists()
    report = report_of(third)
    assert report["first_step"] == int(stopped[1]) + 1 and report["steps"] == 24
    assert_same_end(run.project, "preempted", "lightning")


@elastic_group("ddp")
def test_a_resume_that_would_change_the_schedule_stops_with_one_line(elastic_runs):
    run = elastic_runs("ddp")  # its straight run's checkpoint: 24 steps of a 24-step schedule
    code, log = finish(start(run.project, run.env, "straight", "--epochs", "4", "--resume"))
    said = ("resuming: this run's LR schedule ends at step 32, the checkpoint's at 24: pass "
            "--schedule-change continue (this run's schedule, from step 24) or restart")  # fmt: skip
    assert code != 0 and said in log, log[-3000:]
    assert 'File "' + str(run.project / "train.py") not in log  # a message, not a trace


SLOW_SAVE = 40  # seconds: longer than torchrun's default wait after a SIGTERM (30 s)


@WAITING_GROUP  # it mostly waits for the slow save
def test_torchrun_waits_for_a_preemption_save_longer_than_its_default(tmp_path):
    """SIGTERM to launch/single_node.sh, as a pod's stop or a SLURM step's cancel sends it:
    the workers stop at a step and rank 0's checkpoint takes 40 s to commit; torchrun waits
    for it (the script's TORCH_ELASTIC_SHUTDOWN_TIMEOUT) instead of killing the workers
    after its own 30 s. Then a plain start resumes from that checkpoint."""
    project = generate(tmp_path)
    hook = Path(__file__).with_name("kill_in_save")  # its sitecustomize.py: GENIE_SLOW_SAVE
    env = {**os.environ, **CPU_ENV, **THIS_PYTHON, "PYTHONPATH": str(hook),
           "GENIE_SLOW_SAVE": f"last.pt:{SLOW_SAVE}", "GENIE_FAULT": "slow:*:0.3"}  # fmt: skip
    train = ["bash", "launch/single_node.sh", "--smoke", "--checkpoint-dir", "run",
             "--save-every", "1000", "--log-every", "1"]  # fmt: skip
    process = subprocess.Popen(train, cwd=project, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    seen, started = "", None
    assert process.stdout is not None
    for line in process.stdout:
        seen += line
        if "step 2/" in line:
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            break
    rest, _ = process.communicate(timeout=300)
    seen += rest
    assert started is not None and time.monotonic() - started > SLOW_SAVE, seen[-3000:]
    assert "GENIE_SLOW_SAVE" in seen and "SIGKILL" not in seen, seen[-3000:]
    stopped = re.search(r"(?:SIGTERM|another rank's signal): stopped at step (\d+), "
                        r"checkpoint written to run/last.pt", seen)  # fmt: skip
    assert stopped, seen[-3000:]
    assert (project / "run" / "PREEMPTED").exists()
    env.pop("GENIE_SLOW_SAVE")
    again = subprocess.run(train, cwd=project, env=env, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming from step {stopped[1]} of run/last.pt" in again.stdout + again.stderr
