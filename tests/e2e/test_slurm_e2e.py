"""``genie smoke --on slurm`` on a real one-node SLURM (its own munged, slurmctld, slurmd),
1 node x 2 CPU processes per project. In CI (CI=true) a missing SLURM fails instead of
skipping: .ci/run installs it."""

from __future__ import annotations

import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from .. import slurm_cluster
from ..conftest import run_genie
from .conftest import CPU_ENV, WAITING_GROUP, generate, inject, report_of, torchrun

# One SLURM for all of them: the same xdist worker (pytest --dist loadgroup), with the
# separate hosts' tests (WAITING_GROUP).
pytestmark = [pytest.mark.e2e, WAITING_GROUP]
SLURM_PROJECT = ("--gpus-per-node", "0", "--nproc-per-node", "2", "--scheduler", "slurm")


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"SLURM is required in CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    missing = slurm_cluster.missing()
    if missing:
        _unavailable(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        _unavailable("the test SLURM runs its daemons as root (SlurmUser=root)")
    cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def slurm_runs(slurm, tmp_path_factory):
    """One `genie smoke --on slurm` per project, shared by the tests below. The five jobs
    are in the queue at once (the test node lets jobs share its CPUs), as on a cluster."""
    root = tmp_path_factory.mktemp("slurm-projects")
    env = {**CPU_ENV, "SLURM_CONF": slurm.env["SLURM_CONF"]}
    anchor = "    dist_utils.seed_all(args.seed)  # the same initial weights on every rank\n"
    broken = {
        "raises": "    if dist.get_rank() == 1:\n        raise RuntimeError('injected failure on rank 1')\n",
        "hangs": "    if dist.get_rank() == 1:\n        time.sleep(3600)\n",
    }  # fmt: skip
    projects = {
        "ddp": (), "lightning": ("--framework", "lightning"), "hf": ("--framework", "hf"),
        "fsdp": ("--strategy", "fsdp"), "raises": (), "hangs": (),
    }  # fmt: skip
    for name, flags in projects.items():
        made = generate(root, *SLURM_PROJECT, *flags, name=name)
        if name in broken:
            inject(made, anchor, broken[name])

    def smoke(name: str) -> subprocess.CompletedProcess:
        timeout = ("--timeout", "40") if name == "hangs" else ()
        return run_genie("smoke", name, "--on", "slurm", *timeout, cwd=root, **env)

    with ThreadPoolExecutor(len(projects)) as pool:
        done = dict(zip(projects, pool.map(smoke, projects), strict=True))
    return {name: (root / name, result) for name, result in done.items()}


@pytest.mark.parametrize("framework", ["ddp", "fsdp", "lightning", "hf"])
def test_genie_smoke_on_slurm_passes_through_the_batch_script(slurm_runs, framework, slurm):
    project, result = slurm_runs[framework]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr + slurm.log()
    report = report_of(result.stdout)
    assert report["world_size"] == 2 and report["params_in_sync"] is True
    [log] = (project / "logs").glob(f"{framework}-*.out")  # the job's own output file
    assert "GENIE_SMOKE" in log.read_text()


def test_a_rank_that_raises_on_slurm_fails_with_that_ranks_error(slurm_runs):
    _project, result = slurm_runs["raises"]
    everything = result.stdout + "\n----- stderr\n" + result.stderr  # all of it, if this fails
    assert result.returncode == 1, everything
    assert "injected failure on rank 1" in result.stdout, everything
    assert (
        "rank 1 failed first: RuntimeError: injected failure on rank 1" in result.stderr
    ), everything


def test_a_hanging_job_is_cancelled_at_the_timeout(slurm_runs, slurm):
    _project, result = slurm_runs["hangs"]
    assert result.returncode == 1
    found = re.search(r"timed out after 40 s; SLURM job (\d+) was cancelled", result.stderr)
    assert found, result.stderr
    state = ""
    for _ in range(60):  # the controller may still be cleaning up ("COMPLETING")
        shown = subprocess.run(
            ["scontrol", "show", "job", found.group(1)], env=slurm.env, capture_output=True,
            text=True,
        ).stdout  # fmt: skip
        state = m.group(1) if (m := re.search(r"JobState=(\w+)", shown)) else "gone"
        if state in ("CANCELLED", "gone"):
            break
        time.sleep(0.5)
    assert state in ("CANCELLED", "gone"), state


def test_the_printed_launch_command_is_the_sbatch_line(tmp_path):
    result = run_genie("new", "p", "--yes", "--no-smoke", *SLURM_PROJECT, cwd=tmp_path)
    assert "mkdir -p logs && sbatch launch/slurm.sbatch" in result.stdout
    assert "sbatch launch/slurm.sbatch" in Path(tmp_path, "p", "README.md").read_text()


EXPORT = 'export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-1}"\n'
WORKERS = "srun --nodes=1 --ntasks=1 python -c 'import config; print(\"WORKERS\", config.default_workers())'\n"


def test_a_job_step_gets_the_cpus_its_job_asked_for_and_loads_with_workers(tmp_path):
    """Since Slurm 22.05 a job step does not inherit --cpus-per-task: on a cluster that binds
    tasks to cores, a step's process of the batch script as it was saw one CPU and chose no
    DataLoader worker. With SRUN_CPUS_PER_TASK exported it gets the CPUs the job asked for."""
    cluster = slurm_cluster.start(tmp_path / "slurm", bind_cores=True)
    try:
        project = generate(tmp_path, *SLURM_PROJECT)
        script = (project / "launch" / "slurm.sbatch").read_text()
        head = script[: script.index(EXPORT) + len(EXPORT)]  # the #SBATCH lines, the export
        asked = int(re.search(r"#SBATCH --cpus-per-task=(\d+)", head)[1])
        (project / "logs").mkdir()
        seen = {}
        for name, text in {"exported": head, "as it was": head.replace(EXPORT, "")}.items():
            job = project / f"{name.replace(' ', '-')}.sbatch"
            job.write_text(text + WORKERS)
            out = project / f"{job.stem}.out"
            done = subprocess.run(["sbatch", "--wait", "-o", str(out), str(job)], cwd=project,
                                  env=cluster.env, capture_output=True, text=True, timeout=120)  # fmt: skip
            assert done.returncode == 0, done.stderr + (out.read_text() if out.exists() else "")
            said = re.search(r"^WORKERS (\d+)$", out.read_text(), re.M)
            assert said, out.read_text()[-3000:]
            seen[name] = int(said[1])
    finally:
        cluster.stop()
    assert asked >= 2  # so that the two differ
    assert seen == {"exported": asked - 1, "as it was": 0}


def job_state(slurm, job: str) -> tuple[str, int]:
    shown = subprocess.run(
        ["scontrol", "show", "job", job], env=slurm.env, capture_output=True, text=True
    ).stdout
    state = re.search(r"JobState=(\w+)", shown)
    restarts = re.search(r"Restarts=(\d+)", shown)
    return (state[1] if state else "gone", int(restarts[1]) if restarts else 0)


PREEMPTED = ("--smoke", "--epochs", "3", "--log-every", "1")  # 24 steps
# What each project's resumed job says, and its first step checkpoint (every 3 steps)
RESUMED = {
    "ddp": ("resuming from step {step} of preempted/last.pt", "last.pt"),
    "fsdp": ("resumed from preempted/step-", "step-00000003"),
    "lightning": ("resuming from preempted/last.ckpt", "last.ckpt"),
    "hf": ("resuming from preempted/checkpoint-{step}", "checkpoint-3/trainer_state.json"),
}


def final_weights(folder: Path, project: str, scratch: Path) -> tuple[int, dict]:
    import json

    import torch

    if project == "lightning":
        state = torch.load(folder / "last.ckpt", weights_only=False)
        return state["global_step"], state["state_dict"]
    if project == "hf":
        from safetensors.torch import load_file

        newest = max(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        step = json.loads((newest / "trainer_state.json").read_text())["global_step"]
        return step, load_file(newest / "model.safetensors")
    if project == "fsdp":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        last = (folder / "last").resolve()  # step-N, the newest complete one
        dcp_to_torch_save(last, scratch / f"{folder.name}.pt")
        state = torch.load(scratch / f"{folder.name}.pt", weights_only=True)
        return int(last.name.split("-")[1]), state["model"]
    state = torch.load(folder / "last.pt", weights_only=True)
    return state["step"], state["model"]


@dataclass
class Preempted:
    log: str  # both runs of the job (--open-mode=append)
    straight: subprocess.CompletedProcess  # the same training, uninterrupted


def preempt(slurm, project: Path, framework: str) -> Preempted:
    """SIGUSR1 to the batch script once its first step checkpoint is written, the requeued
    job released at once; then the same training uninterrupted under torchrun."""
    env = {**os.environ, **CPU_ENV, "SLURM_CONF": slurm.env["SLURM_CONF"]}
    slow = {**env, "GENIE_FAULT": "slow:*:0.3"}  # 24 steps in about 7 s: time to signal it
    job = subprocess.run(
        ["sbatch", "--parsable", "--job-name=preempted", "launch/slurm.sbatch", *PREEMPTED,
         "--checkpoint-dir", "preempted"],
        cwd=project, env=slow, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    log = project / "logs" / f"preempted-{job}.out"
    deadline = time.monotonic() + 300  # the four jobs run at once
    # its first step checkpoint (every 3 steps with --smoke): training is under way
    saved = project / "preempted" / RESUMED[framework][1]
    while not saved.exists():
        state = job_state(slurm, job)
        assert time.monotonic() < deadline and state[0] in ("PENDING", "RUNNING"), (
            state, log.read_text()[-4000:] if log.exists() else "", slurm.log())  # fmt: skip
        time.sleep(0.2)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=env, check=True)
    released = False
    while (state := job_state(slurm, job)) != ("COMPLETED", 1):
        assert time.monotonic() < deadline and state[0] not in ("FAILED", "CANCELLED"), (
            state, log.read_text()[-4000:], slurm.log())  # fmt: skip
        if state == ("PENDING", 1) and not released:
            # Requeued: SLURM holds it for CredExpire (120 s) so that no node still holds
            # the old run's revoked credential; start it now, but not within the second of
            # the revocation ("Job credential revoked" fails it: seen in CI).
            time.sleep(2)
            subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], env=env)
            released = True
        time.sleep(0.5)
    straight = torchrun(project, *PREEMPTED, "--checkpoint-dir", "straight", env=env,
                        timeout=300)  # fmt: skip
    return Preempted(log.read_text(), straight)


@pytest.fixture(scope="session")
def slurm_preempted(slurm_runs, slurm) -> dict[str, Preempted | AssertionError]:
    """Each project's preempted and requeued job (its smoke job has finished), the four at
    once: most of a job's time is SLURM's start, signal and requeue, not training. What
    failed fails that framework's test only."""

    def attempt(framework: str) -> Preempted | AssertionError:
        try:
            return preempt(slurm, slurm_runs[framework][0], framework)
        except AssertionError as failed:
            return failed

    with ThreadPoolExecutor(len(RESUMED)) as pool:
        return dict(zip(RESUMED, pool.map(attempt, RESUMED), strict=True))


@pytest.mark.parametrize("framework", list(RESUMED))
def test_a_job_warned_before_its_time_limit_checkpoints_requeues_and_finishes(
    slurm_runs, slurm_preempted, framework, tmp_path
):
    """SIGUSR1 to the batch script (what --signal=B:USR1@120 sends): the job step stops
    at an optimizer step with a checkpoint, the job is requeued, and the requeued job
    resumes there and ends with the weights of an uninterrupted run. Lightning too: its
    own SLURM handler (a save inside the signal handler, each rank wherever it is) is
    off, and its ranks stop together at one step (under FSDP too; FSDP needs GPUs)."""
    import torch

    project, _ = slurm_runs[framework]
    run = slurm_preempted[framework]
    if isinstance(run, AssertionError):
        raise run
    text, straight = run.log, run.straight
    assert "SIGUSR1: checkpointing at the next step, then requeueing job" in text
    stopped = re.search(r"SIGTERM: stopped at step (\d+), checkpoint written", text)
    assert stopped and "exiting 75" in text, text[-4000:]
    assert RESUMED[framework][0].format(step=stopped[1]) in text, text[-4000:]
    assert report_of(text)["steps"] == 24
    assert straight.returncode == 0, straight.stderr[-3000:]
    (a_step, a), (b_step, b) = (
        final_weights(project / d, framework, tmp_path) for d in ("straight", "preempted")
    )
    assert a_step == b_step == 24
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name
