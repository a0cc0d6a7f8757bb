"""A start resumes its run by itself (issue 45): the same command again, after a SIGKILL of
the whole launch (a lost node, a restarted pod, a resubmitted job) or a Ctrl-C, ends as
one uninterrupted run; --fresh sets the old checkpoints aside; another run's folder is
refused with one line. Every framework, real (not --smoke) training."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import CPU_ENV, THIS_PYTHON, generate

CPUS = ("--nproc-per-node", "2", "--gpus-per-node", "0")
VARIANTS = {
    "ddp": ("--framework", "ddp", *CPUS),
    "fsdp": ("--framework", "ddp", "--strategy", "fsdp", *CPUS),
    "lightning": ("--framework", "lightning", *CPUS),
    "hf": ("--framework", "hf", *CPUS),
    "dp": ("--framework", "dp", "--gpus-per-node", "0"),
}
# 2048 samples in 16s on 2 ranks: 64 optimizer steps an epoch, a checkpoint every 5
TRAIN = ("--num-samples", "2048", "--batch-size", "16", "--epochs", "2", "--num-workers", "0")


def command(project: Path, variant: str, folder: str, *extra: str) -> dict:
    return dict(
        args=["bash", "launch/single_node.sh", *TRAIN, "--save-every", "5", "--checkpoint-dir",
              folder, *extra],
        cwd=project, env={**os.environ, **CPU_ENV, **THIS_PYTHON},
    )  # fmt: skip


def launch(project: Path, variant: str, folder: str, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        **command(project, variant, folder, *extra), capture_output=True, text=True, timeout=600
    )
    done.stdout += done.stderr
    return done


# The file whose commit completes a checkpoint: written (renamed into place) last
COMMITS = {"fsdp": ".metadata", "lightning": "last.ckpt", "hf": "trainer_state.json"}
KILL_IN_SAVE = Path(__file__).with_name("kill_in_save")  # its sitecustomize.py
# the checkpoint the kill leaves complete (step 5), as the resuming run names it
RESUMED = {"hf": r"checkpoint-5\b", "lightning": r"last\.ckpt$"}


def saved(folder: Path, variant: str, since: int) -> bool:
    """Whether the run in ``folder`` has completed a checkpoint since ``since`` (ns)."""
    name = COMMITS.get(variant, "last.pt")
    # os.walk, not rglob: the run renames and rotates folders while this looks (a folder
    # gone between listing and reading it made rglob raise)
    for parent, _, files in os.walk(folder):
        try:
            if name in files and os.stat(os.path.join(parent, name)).st_mtime_ns > since:
                return True
        except FileNotFoundError:
            continue
    return False


def kill_in_the_second_save(project: Path, variant: str, folder: str) -> str:
    """The command, SIGKILLed with all its processes (as a node is lost) in the middle of
    its second checkpoint save, just before the file that completes it is committed
    (kill_in_save/sitecustomize.py); its output."""
    env = {"GENIE_KILL_IN_SAVE": f"{COMMITS.get(variant, 'last.pt')}:2",
           "PYTHONPATH": str(KILL_IN_SAVE)}  # fmt: skip
    run = command(project, variant, folder)
    log = project / f"{folder}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            **{**run, "env": {**run["env"], **env}},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        code = process.wait(timeout=300)
    said = log.read_text()
    assert code == -signal.SIGKILL and "GENIE_KILL_IN_SAVE: SIGKILL" in said, said[-3000:]
    time.sleep(0.5)  # the kernel's SIGKILL of the other ranks, as torchrun ended
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and in_project(pid, project)]
    assert not left, f"processes of the killed run still running: {left}"
    return said


def in_project(pid: str, project: Path) -> bool:
    try:
        return Path(f"/proc/{pid}/cwd").resolve() == project.resolve()
    except OSError:  # ended meanwhile, or not ours to read
        return False


def ctrl_c_after_a_few_steps(project: Path, variant: str, folder: str) -> tuple[int, str]:
    """The command in a terminal of its own, Ctrl-C pressed once it trains (it has written
    a checkpoint: SIGINT to its foreground process group, as a terminal sends it); its exit
    code and output."""
    log, since = project / f"{folder}-ctrl-c.log", time.time_ns()
    with open(log, "w") as out:
        process = subprocess.Popen(
            **command(project, variant, folder, "--log-every", "1"),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while not saved(project / folder, variant, since) and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=120)
    return code, log.read_text()


def weights(folder: Path, variant: str, scratch: Path) -> dict:
    import torch

    if variant == "fsdp":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(folder / "last", scratch / f"{folder.name}.pt")
        return torch.load(scratch / f"{folder.name}.pt", weights_only=True)["model"]
    if variant == "hf":
        from safetensors.torch import load_file

        newest = max(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        return load_file(newest / "model.safetensors")
    if variant == "lightning":
        return torch.load(folder / "last.ckpt", weights_only=False)["state_dict"]
    return torch.load(folder / "last.pt", weights_only=True)["model"]


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_same_command_after_a_kill_resumes_and_ends_as_one_run(variant, tmp_path):
    """One run, interrupted twice: killed in its second save, the same command resumes
    from the first save; stopped there by Ctrl-C, the same command resumes at that step
    and ends. Then --fresh sets the folder aside and trains from scratch: that run is the
    uninterrupted one the interrupted run must end as."""
    import torch

    project = generate(tmp_path, *VARIANTS[variant])
    killed = kill_in_the_second_save(project, variant, "run")
    assert "resum" not in killed.lower()  # a new folder: nothing to resume
    if variant == "lightning":  # its line names no step: last.ckpt is step 5's
        ckpt = torch.load(project / "run" / "last.ckpt", weights_only=False)
        assert ckpt["global_step"] == 5

    # the same command resumes from the save before the kill; Ctrl-C once it has saved
    # again: a checkpoint at the step, one line, exit 130
    code, said = ctrl_c_after_a_few_steps(project, variant, "run")
    stopped = [line for line in said.splitlines() if "stopped at step" in line]
    assert code == 130 and len(stopped) == 1, said[-3000:]
    assert stopped[0].endswith("; the same command resumes there"), said[-3000:]
    assert "Traceback" not in said and "FAILED" not in said, said[-3000:]
    resuming = [line for line in said.splitlines() if "resum" in line.lower()]
    assert resuming and f" run{os.sep}" in resuming[0], said[-3000:]
    assert re.search(RESUMED.get(variant, r"step 5\b"), resuming[0]), resuming
    step = stopped[0].split("stopped at step ")[1].split(",")[0]
    again = launch(project, variant, "run")
    where = {"hf": f"run/checkpoint-{step}", "lightning": "run/last.ckpt"}
    assert again.returncode == 0, again.stdout[-3000:]
    assert where.get(variant, f"step {step}") in again.stdout, again.stdout[-3000:]
    resumed = weights(project / "run", variant, tmp_path)

    # --fresh: everything the folder held moves, byte for byte, into earlier-<time>/, and
    # the run starts over: it ends as the resumed runs did
    before = files(project / "run")
    fresh = launch(project, variant, "run", "--fresh")
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    [aside] = (project / "run").glob("earlier-*")
    assert files(aside) == before
    assert "--fresh: the earlier checkpoints are now in run/earlier-" in fresh.stdout
    assert "resum" not in fresh.stdout.lower()  # it starts over
    straight = weights(project / "run", variant, tmp_path)
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)

    # another run's folder (here: another model) is refused, and nothing in it changes
    marker = project / "run" / "RUN.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "model": "another"}))
    before = files(project / "run")
    other = launch(project, variant, "run")
    assert other.returncode != 0
    said = [line for line in other.stdout.splitlines() if "holds the checkpoints of" in line]
    assert said == [
        "run holds the checkpoints of another run (model 'another' there, None here): pass "
        "--fresh to set them aside and start over, or another --checkpoint-dir"
    ], other.stdout[-3000:]
    assert 'Traceback (most recent call last):\n  File "' + str(project) not in other.stdout
    assert files(project / "run") == before


@pytest.mark.parametrize("variant", ["ddp", "lightning", "hf"])
def test_a_second_ctrl_c_stops_a_run_stuck_before_its_step_at_once(tmp_path, variant):
    """Rank 1 stuck in its third step (GENIE_FAULT=hang:1:3), rank 0 waiting for it in a
    collective: the first Ctrl-C waits for a step boundary that never comes, the second
    stops every process, exit 130, no traceback."""
    project = generate(tmp_path, *VARIANTS[variant])
    log = project / "stuck.log"
    env = {**os.environ, **CPU_ENV, **THIS_PYTHON, "GENIE_FAULT": "hang:1:3"}
    with open(log, "w") as out:
        process = subprocess.Popen(
            ["bash", "launch/single_node.sh", "--smoke", "--tracker", "none"],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while "GENIE_FAULT hang on rank 1" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(3)
        assert process.poll() is None, log.read_text()[-3000:]  # no step boundary to stop at
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=60)
    said = log.read_text()
    assert code == 130, said[-3000:]
    assert said.count("Ctrl-C: stopping at the next optimizer step") == 1, said[-3000:]
    assert "Traceback" not in said, said[-3000:]


def test_a_worker_whose_torchrun_is_pid_1_trains_on(tmp_path):
    """In a container torchrun is PID 1 (the Dockerfile's CMD, the manifests' command): a
    worker whose parent is PID 1 is not one whose torchrun has ended."""
    project = generate(tmp_path, *VARIANTS["ddp"])
    worker = "import dist_utils; dist_utils.end_with_torchrun(); print('trains on')"
    torchrun = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {worker!r}])"
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", torchrun],
        cwd=project, env={**os.environ, **CPU_ENV, "TORCHELASTIC_RUN_ID": "pid1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if "unshare failed" in done.stderr or "Operation not permitted" in done.stderr:
        pytest.skip(f"no PID namespace here: {done.stderr.strip()}")
    assert done.returncode == 0 and done.stdout.strip() == "trains on", done.stderr[-2000:]
