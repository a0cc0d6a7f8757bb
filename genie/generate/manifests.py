"""The Kubeflow manifests: a training operator ``PyTorchJob`` and a Trainer v2 ``TrainJob``,
each as data and as the YAML text a project holds, with a header saying how to use it (pure).
"""

from __future__ import annotations

import re
from typing import Any

from genie.generate.launch import (
    ELASTIC_MAX_RESTARTS,
    ENTRYPOINT,
    cpus_per_node,
)
from genie.generate.preemption import PREEMPTION_NOTICE, shutdown_timeout
from genie.registry import FRAMEWORKS
from genie.spec import Spec

K8S_WORKDIR = "/workspace"  # where the image holds the project (the Dockerfile's WORKDIR)
VOLUME_FILE = "launch/volume.yaml"
# The run's volume, in every pod: the project's own output folders (train.py's defaults land
# on it) and the model caches, so a restarted pod, whose filesystem starts clean, resumes.
RUN_VOLUME = "run"
CACHE_DIR = "/cache"
RUN_MOUNTS = (
    ("checkpoints", f"{K8S_WORKDIR}/checkpoints"),
    ("runs", f"{K8S_WORKDIR}/runs"),
    ("cache", CACHE_DIR),
)
CACHE_ENV = {"HF_HOME": f"{CACHE_DIR}/huggingface", "TORCH_HOME": f"{CACHE_DIR}/torch"}
RDZV_PORT = 29400  # torchrun's own c10d port, on the first worker pod
TRAINER_MANAGER = "genie"  # who owns the TrainJob's runtime patch
TRAINER_CONTAINER = "node"  # the torch-distributed runtime's job and container
COMMAND = ("torchrun", ENTRYPOINT)  # every pod's (and the Dockerfile's)


def kubernetes_name(spec: Spec) -> str:
    """The project name as a Kubernetes object name (DNS-1123: a-z, 0-9, '-')."""
    name = re.sub(r"[^a-z0-9-]+", "-", spec.name.lower()).strip("-")[:63].strip("-")
    return name or "train"


def claim_name(spec: Spec) -> str:
    return f"{kubernetes_name(spec)[:59].rstrip('-')}-run"


def elastic(spec: Spec) -> bool:
    """c10d rendezvous on several nodes: a pod that is lost and restarted rejoins the job."""
    return spec.multi_node and spec.rdzv == "c10d"


def volume_claim(spec: Spec) -> dict[str, Any]:
    """The run's PersistentVolumeClaim: every pod mounts it at once (ReadWriteMany)."""
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": spec.storage_size}},
    }
    if spec.storage_class:  # else the cluster's default class
        claim["storageClassName"] = spec.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name(spec)},
        "spec": claim,
    }


def _volumes(spec: Spec) -> list[dict[str, Any]]:
    # NCCL and the DataLoader's workers share memory through /dev/shm (64 MiB without this)
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(spec)}},
    ]


def _mounts() -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return mounts + [
        {"name": RUN_VOLUME, "mountPath": path, "subPath": sub} for sub, path in RUN_MOUNTS
    ]


# torchrun (torch 2.5+) serves the workers' store from the agent that was rank 0 in the first
# round, and such an agent does not publish it again in a later round: a pod that replaces a
# lost one waits for it until the rendezvous times out (measured on torch 2.14;
# pytorch/pytorch#135712). Without the sharing, every round publishes its own.
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _env(spec: Spec) -> list[dict[str, str]]:
    env = {**CACHE_ENV, **(ELASTIC_ENV if elastic(spec) else {})}
    if (seconds := shutdown_timeout(spec)) is not None:  # inside the pods' grace period
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(seconds)
    return [{"name": name, "value": value} for name, value in env.items()]


def _k8s_resources(spec: Spec) -> dict[str, Any]:
    # the CPUs launch/slurm.sbatch asks for too: train.py sizes its DataLoader workers
    # from them (requests, no limit: a CPU limit throttles the data loaders)
    resources: dict[str, Any] = {"requests": {"cpu": cpus_per_node(spec)}}
    if spec.gpus_per_node:
        resources["limits"] = {"nvidia.com/gpu": spec.gpus_per_node}
    return resources


def _grace(spec: Spec) -> dict[str, int]:
    # SIGTERM first (preemption, eviction): train.py checkpoints at its next step and exits;
    # the restarted pod resumes from that checkpoint on the run's volume.
    if FRAMEWORKS[spec.framework].stop_signals:
        return {"terminationGracePeriodSeconds": PREEMPTION_NOTICE}
    return {}


def _pod(spec: Spec) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "pytorch",  # the training operator finds the container by this name
        "image": spec.image,
        "workingDir": K8S_WORKDIR,
        # The operator gives torchrun its PET_* settings: the nodes, this node's rank and the
        # master's address, or with the elastic policy the rendezvous (operator_env below).
        "command": list(COMMAND),
        "env": _env(spec),
        "volumeMounts": _mounts(),
        "resources": _k8s_resources(spec),
    }
    return {"spec": {"containers": [container], "volumes": _volumes(spec), **_grace(spec)}}


def pytorchjob(spec: Spec) -> dict[str, Any]:
    """A Kubeflow training operator ``PyTorchJob`` (kubeflow.org/v1). With c10d on several
    nodes: ``nodes`` Worker pods under an elastic policy (torchrun re-forms the group when a
    pod is lost and restarted); else one Master pod and ``nodes - 1`` Workers."""

    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": _pod(spec)}

    job: dict[str, Any] = {"nprocPerNode": str(spec.processes_per_node)}
    if elastic(spec):
        job["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "rdzvPort": RDZV_PORT,
            "rdzvId": kubernetes_name(spec),
            # a fixed size: the global batch and the data's split stay as planned
            "minReplicas": spec.nodes,
            "maxReplicas": spec.nodes,
            "maxRestarts": ELASTIC_MAX_RESTARTS,
        }
        job["pytorchReplicaSpecs"] = {"Worker": replica(spec.nodes)}
    else:
        job["pytorchReplicaSpecs"] = {"Master": replica(1)}
        if spec.nodes > 1:
            job["pytorchReplicaSpecs"]["Worker"] = replica(spec.nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": kubernetes_name(spec)},
        "spec": job,
    }


def operator_env(
    spec: Spec, node_rank: int, nodes: int, per_node: int, addr: str, port: int
) -> dict[str, str]:
    """The torchrun settings the training operator gives pod ``node_rank`` of
    :func:`pytorchjob` (its PET_* variables), with the nodes, processes and the master's or
    rendezvous address given: genie's smoke test runs the manifest's command with them."""
    env = {"PET_NPROC_PER_NODE": str(per_node), **CACHE_ENV}
    if elastic(spec):
        return {
            **env,
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{addr}:{port}",
            "PET_RDZV_ID": kubernetes_name(spec),
            "PET_NNODES": f"{nodes}:{nodes}",
            "PET_MAX_RESTARTS": str(ELASTIC_MAX_RESTARTS),
        }
    return {
        **env,
        "PET_NNODES": str(nodes),
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": addr,
        "PET_MASTER_PORT": str(port),
    }


def trainjob(spec: Spec) -> dict[str, Any]:
    """A Kubeflow Trainer ``TrainJob`` (trainer.kubeflow.org/v1alpha1, Trainer 2.2 or later)
    on the ``torch-distributed`` runtime, which starts torchrun on every node; the volumes
    reach its pods as a runtime patch."""
    trainer: dict[str, Any] = {
        "image": spec.image,
        "command": list(COMMAND),
        "env": _env(spec),
        "numNodes": spec.nodes,
        "numProcPerNode": spec.processes_per_node,
        "resourcesPerNode": _k8s_resources(spec),
    }
    pod = {
        "volumes": _volumes(spec),
        "containers": [{"name": TRAINER_CONTAINER, "volumeMounts": _mounts()}],
        **_grace(spec),
    }
    patch = {
        "manager": TRAINER_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": TRAINER_CONTAINER, "template": {"spec": {"template": {"spec": pod}}}}
        ]}}},
    }  # fmt: skip
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": kubernetes_name(spec)},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }


def manifest_text(manifest: dict[str, Any], header: str) -> str:
    """A manifest as YAML with a comment header."""
    import yaml

    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


def texts(spec: Spec) -> dict[str, str]:
    """The Kubernetes manifests as YAML text, each with a header saying how to use it."""
    shape = f"{spec.nodes} node(s) x {spec.processes_per_node} process(es)"
    image = (
        f"The image ({spec.image}) is built from this folder's Dockerfile: "
        f"docker build -t {spec.image} . && docker push {spec.image}"
    )
    volume = (
        f"First: kubectl apply -f {VOLUME_FILE} (the run's volume: checkpoints, logs and "
        "model caches outlive the pods)."
    )
    checked = "genie validated it against the CRD schema; it did not run it on a cluster."
    restarts = (
        f"A lost pod is restarted (restartPolicy) and rejoins: torchrun re-forms the group "
        f"(up to {ELASTIC_MAX_RESTARTS} times) and every rank resumes from the newest "
        "checkpoint on the volume."
        if elastic(spec)
        else "A failed pod is restarted (restartPolicy) and the job resumes from the newest "
        "checkpoint on the volume."
    )
    job_header = [
        f"Kubeflow training operator PyTorchJob (kubeflow.org/v1): {shape}.",
        image, volume, restarts, "Submit: kubectl apply -f launch/pytorchjob.yaml", checked,
    ]  # fmt: skip
    trainer_header = [
        f"Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1, Trainer 2.2 or later: "
        f"runtimePatches), torch-distributed runtime: {shape}.",
        image, volume,
        "Restarts: the runtime's JobSet failurePolicy (maxRestarts, set by the cluster's "
        "admin) restarts the job, which resumes from the newest checkpoint on the volume.",
        "Submit: kubectl apply -f launch/trainjob.yaml", checked,
    ]  # fmt: skip
    claim_header = [
        f"The run's volume: {spec.storage_size}, ReadWriteMany (every pod mounts it), storage "
        + (f"class {spec.storage_class}." if spec.storage_class else "class: the cluster's "
           "default (kubectl get storageclass; set genie's --storage-class for another)."),
        "It must be a shared filesystem (NFS, CephFS, Lustre, EFS, Filestore, ...): a class "
        "that offers only ReadWriteOnce leaves the pods Pending.",
        f"Apply it once, before the job: kubectl apply -f {VOLUME_FILE}",
    ]  # fmt: skip
    return {
        "pytorchjob": manifest_text(pytorchjob(spec), "\n".join(job_header)),
        "trainjob": manifest_text(trainjob(spec), "\n".join(trainer_header)),
        "volume": manifest_text(volume_claim(spec), "\n".join(claim_header)),
    }
