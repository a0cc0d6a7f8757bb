"""The PyTorchJob's own pods, simulated on this machine (issue 45): each pod runs the
manifest's command in a fresh copy of the image's folder, with the settings the Kubeflow
training operator gives its pods (read from the manifest by the operator's rules) and the
run's volume mounted where the manifest mounts it. A pod that is lost and restarted (a clean
filesystem, the same volume) rejoins under the elastic policy, and the job ends as one
uninterrupted run."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .conftest import CPU_ENV, THIS_PYTHON, generate

ANSWERS = ("--nodes", "2", "--scheduler", "kubernetes", "--nproc-per-node", "1",
           "--gpus-per-node", "0")  # fmt: skip
# 1024 samples on 2 ranks: 32 optimizer steps an epoch, a checkpoint every 5; what
# a user would add as the container's args
TRAIN = ("--num-samples", "1024", "--batch-size", "16", "--epochs", "2", "--num-workers", "0",
         "--save-every", "5")  # fmt: skip
# The elastic rendezvous host, <job>-worker-0, is this machine's loopback here.
WORKER_0 = "127.0.0.1"


def operator_env(job: dict) -> dict[str, str]:
    """What the training operator (kubeflow/trainer v1.9, pkg/controller.v1/pytorch) gives
    every pod of an elastic PyTorchJob: torchrun's PET_* settings."""
    spec = job["spec"]
    elastic = spec["elasticPolicy"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]  # the host is <job>-worker-0
    return {
        "PET_NPROC_PER_NODE": spec["nprocPerNode"],
        "PET_RDZV_BACKEND": elastic["rdzvBackend"],
        "PET_RDZV_ENDPOINT": f"{WORKER_0}:{elastic['rdzvPort']}",
        "PET_RDZV_ID": elastic["rdzvId"],
        "PET_NNODES": f"{elastic['minReplicas']}:{elastic['maxReplicas']}",
        "PET_MAX_RESTARTS": str(elastic["maxRestarts"]),
    }


class Pods:
    """The job's pods on this machine: one volume folder, each pod a fresh folder."""

    def __init__(self, project: Path, where: Path) -> None:
        self.project, self.where = project, where
        self.job = yaml.safe_load((project / "launch" / "pytorchjob.yaml").read_text())
        worker = self.job["spec"]["pytorchReplicaSpecs"]["Worker"]
        self.replicas = worker["replicas"]
        [self.container] = worker["template"]["spec"]["containers"]
        self.volume = where / "volume"
        self.volume.mkdir(parents=True)
        self.started = 0

    def start(self) -> subprocess.Popen:
        """A new pod: the image's folder afresh, the volume mounted, the manifest's command."""
        self.started += 1
        pod = self.where / f"pod-{self.started}"
        shutil.copytree(self.project, pod)  # the image holds the project at its workingDir
        workdir = Path(self.container["workingDir"])
        env = {**os.environ, **CPU_ENV, **THIS_PYTHON, **operator_env(self.job)}
        env.update({e["name"]: e["value"] for e in self.container["env"]})
        for mount in self.container["volumeMounts"]:
            if mount["name"] != "run":
                continue  # /dev/shm: this machine's own
            source = self.volume / mount["subPath"]
            source.mkdir(exist_ok=True)
            path = Path(mount["mountPath"])
            if path.is_relative_to(workdir):  # over a folder of the project
                (pod / path.relative_to(workdir)).symlink_to(source, target_is_directory=True)
            else:  # outside it: where the environment points
                for name, value in env.items():
                    if value == str(path) or value.startswith(f"{path}/"):
                        env[name] = str(source) + value[len(str(path)) :]
        log = open(pod / "pod.log", "w")  # noqa: SIM115 (closed with the test's folder)
        return subprocess.Popen(
            [*self.container["command"], *TRAIN], cwd=pod, env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def start_all(self) -> list[subprocess.Popen]:
        first = self.start()  # worker-0 hosts the rendezvous: up before the others look
        wait_for(lambda: listening(self.job), first, "the rendezvous store never came up")
        return [first, *(self.start() for _ in range(self.replicas - 1))]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{(p / 'pod.log').read_text()[-3000:]}"
            for p in sorted(self.where.glob("pod-*"))
        )


def listening(job: dict) -> bool:
    with socket.socket() as s:
        return s.connect_ex((WORKER_0, job["spec"]["elasticPolicy"]["rdzvPort"])) == 0


def wait_for(condition, process: subprocess.Popen, why: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None and time.monotonic() < deadline, why
        time.sleep(0.05)


def lose(pod: subprocess.Popen) -> None:
    """The pod is lost: every process in it dies at once (its workers run in sessions of
    their own, so not only torchrun's process group), its filesystem with it."""
    from genie.smoke.process import descendants

    for pid in [pod.pid, *descendants(pod.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pod.wait(timeout=60)


def finish(pods: Pods, processes: list[subprocess.Popen]) -> None:
    try:
        codes = [p.wait(timeout=600) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                lose(p)
    assert codes == [0] * len(processes), pods.logs()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("k8s"), *ANSWERS)


def test_a_lost_pod_restarted_on_a_clean_filesystem_rejoins_and_the_run_ends_as_one(
    project, tmp_path
):
    import torch

    straight = Pods(project, tmp_path / "straight")
    finish(straight, straight.start_all())

    lost = Pods(project, tmp_path / "lost")
    first, second = lost.start_all()
    last = lost.volume / "checkpoints" / "last.pt"
    wait_for(last.exists, first, "no checkpoint on the volume: " + lost.logs())
    time.sleep(0.05)
    assert second.poll() is None, "the run ended before the pod was lost: make it longer"
    lose(second)
    replacement = lost.start()  # restartPolicy: a new pod, the same volume
    finish(lost, [first, replacement])

    log = lost.logs()
    assert "resuming from" in log and "last.pt" in log, log
    a = torch.load(straight.volume / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(last, weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), log
