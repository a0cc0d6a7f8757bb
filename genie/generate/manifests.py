"""The Kubeflow manifests: a training operator ``PyTorchJob`` and a Trainer v2 ``TrainJob``,
each as data and as the YAML text a project holds, with a header saying how to use it (pure).
"""

from __future__ import annotations

import re
from typing import Any

from genie.generate.launch import ENTRYPOINT, PREEMPTION_NOTICE, cpus_per_node
from genie.registry import FRAMEWORKS
from genie.spec import Spec

K8S_WORKDIR = "/workspace"  # where the image holds the project


def kubernetes_name(spec: Spec) -> str:
    """The project name as a Kubernetes object name (DNS-1123: a-z, 0-9, '-')."""
    name = re.sub(r"[^a-z0-9-]+", "-", spec.name.lower()).strip("-")[:63].strip("-")
    return name or "train"


def _k8s_resources(spec: Spec) -> dict[str, Any]:
    # the CPUs launch/slurm.sbatch asks for too: train.py sizes its DataLoader workers
    # from them (requests, no limit: a CPU limit throttles the data loaders)
    resources: dict[str, Any] = {"requests": {"cpu": cpus_per_node(spec)}}
    if spec.gpus_per_node:
        resources["limits"] = {"nvidia.com/gpu": spec.gpus_per_node}
    return resources


def _pod(spec: Spec) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "pytorch",  # the training operator finds the container by this name
        "image": spec.image,
        "workingDir": K8S_WORKDIR,
        # The operator sets PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR
        # and PET_MASTER_PORT, which torchrun reads.
        "command": ["torchrun", ENTRYPOINT],
        # NCCL and the data loader's workers share memory through /dev/shm
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    container["resources"] = _k8s_resources(spec)
    pod: dict[str, Any] = {
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    if FRAMEWORKS[spec.framework].stop_signals:
        # SIGTERM first (preemption, eviction): train.py checkpoints at its next step
        # and exits; the restarted pod (restartPolicy) resumes from that checkpoint.
        pod["terminationGracePeriodSeconds"] = PREEMPTION_NOTICE
    return {"spec": pod}


def pytorchjob(spec: Spec) -> dict[str, Any]:
    """A Kubeflow training operator ``PyTorchJob`` (kubeflow.org/v1): one Master pod and
    ``nodes - 1`` Worker pods, each running torchrun for ``nproc_per_node`` processes."""
    replicas: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _pod(spec)}
    }
    if spec.nodes > 1:
        replicas["Worker"] = {
            "replicas": spec.nodes - 1, "restartPolicy": "OnFailure", "template": _pod(spec)
        }  # fmt: skip
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": kubernetes_name(spec)},
        "spec": {"nprocPerNode": str(spec.processes_per_node), "pytorchReplicaSpecs": replicas},
    }


def trainjob(spec: Spec) -> dict[str, Any]:
    """A Kubeflow Trainer v2 ``TrainJob`` (trainer.kubeflow.org/v1alpha1) on the
    ``torch-distributed`` runtime, which starts torchrun on every node."""
    trainer: dict[str, Any] = {
        "image": spec.image,
        "command": ["torchrun", ENTRYPOINT],
        "numNodes": spec.nodes,
        "numProcPerNode": spec.processes_per_node,
    }
    trainer["resourcesPerNode"] = _k8s_resources(spec)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": kubernetes_name(spec)},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer},
    }


def manifest_text(manifest: dict[str, Any], header: str) -> str:
    """A manifest as YAML with a comment header."""
    import yaml

    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


def texts(spec: Spec) -> dict[str, str]:
    """The Kubeflow manifests as YAML text, each with a header saying how to use it."""
    shape = f"{spec.nodes} node(s) x {spec.processes_per_node} process(es)"
    image = (
        f"The image ({spec.image}) must hold this folder at {K8S_WORKDIR} with "
        "requirements-torch.txt and requirements.txt installed; set it with genie's --image."
    )
    checked = (
        "genie validated this manifest against the CRD schema; it did not run it on a cluster."
    )
    job_header = [
        f"Kubeflow training operator PyTorchJob (kubeflow.org/v1): {shape}.",
        image,
        "Submit: kubectl apply -f launch/pytorchjob.yaml",
        checked,
    ]
    trainer_header = [
        f"Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1), torch-distributed "
        f"runtime: {shape}.",
        image,
        "Submit: kubectl apply -f launch/trainjob.yaml",
        checked,
    ]
    return {
        "pytorchjob": manifest_text(pytorchjob(spec), "\n".join(job_header)),
        "trainjob": manifest_text(trainjob(spec), "\n".join(trainer_header)),
    }
