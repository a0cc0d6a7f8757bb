"""The Kubernetes manifests genie writes are valid against the Kubeflow operators' own CRD
schemas (copied into tests/k8s_schemas, with their source and license); they are not run on a
cluster."""

from __future__ import annotations

import copy

import pytest
import yaml

from genie.detect import Machine
from genie.generate import engine
from genie.generate.manifests import kubernetes_name
from genie.spec import build_spec

from .conftest import ROOT

SCHEMAS = ROOT / "tests" / "k8s_schemas"
CRDS = {
    "launch/pytorchjob.yaml": "kubeflow.org_pytorchjobs.yaml",
    "launch/trainjob.yaml": "trainer.kubeflow.org_trainjobs.yaml",
}
VOLUME = "launch/volume.yaml"
VARIANTS = {
    "one-cpu-node": {"gpus_per_node": 0},
    "four-gpu-nodes": {"nodes": 4, "gpus_per_node": 8},
    "lightning-odd-name": {"name": "My_Proj.v2", "framework": "lightning", "gpus_per_node": 2,
                           "image": "registry.example.com/team/proj:1.0"},
    "hf-two-nodes": {"framework": "hf", "nodes": 2, "gpus_per_node": 4, "rdzv": "static",
                     "storage_class": "nfs-client", "storage_size": "2Ti"},
}  # fmt: skip
MACHINE = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")


def validator(crd_file: str):
    import jsonschema  # a test dependency: a missing one fails, it does not skip

    crd = yaml.safe_load((SCHEMAS / crd_file).read_text())
    [version] = [v for v in crd["spec"]["versions"] if v.get("served", True)][:1]
    schema = version["schema"]["openAPIV3Schema"]
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    return jsonschema.Draft7Validator(schema), f"{group}/{version['name']}", kind


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, dict]]:
    result = {}
    for variant, answers in VARIANTS.items():
        spec = build_spec({"name": "proj", **answers, "scheduler": "kubernetes"}, MACHINE)
        files = engine.render(spec)
        result[variant] = {path: yaml.safe_load(files[path]) for path in (*CRDS, VOLUME)}
        result[variant]["Dockerfile"] = files["Dockerfile"].decode()
    return result


@pytest.mark.parametrize("path", list(CRDS))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_generated_manifest_is_valid_against_its_crd_schema(manifests, variant, path):
    check, api_version, kind = validator(CRDS[path])
    manifest = manifests[variant][path]
    errors = [e.message for e in check.iter_errors(manifest)]
    assert errors == []
    assert (manifest["apiVersion"], manifest["kind"]) == (api_version, kind)


def test_a_broken_manifest_is_rejected(manifests):
    check, _version, _kind = validator(CRDS["launch/pytorchjob.yaml"])
    broken = copy.deepcopy(manifests["four-gpu-nodes"]["launch/pytorchjob.yaml"])
    broken["spec"]["nprocPerNode"] = 8  # the CRD wants a string
    assert not check.is_valid(broken)
    del broken["spec"]["pytorchReplicaSpecs"]
    assert not check.is_valid(broken)
    check, _version, _kind = validator(CRDS["launch/trainjob.yaml"])
    broken = copy.deepcopy(manifests["four-gpu-nodes"]["launch/trainjob.yaml"])
    broken["spec"]["trainer"]["numNodes"] = "four"
    assert not check.is_valid(broken)


def test_c10d_nodes_are_elastic_workers_and_static_ones_a_master_and_workers(manifests):
    """c10d (the default): every node a Worker under an elastic policy of exactly ``nodes``
    (the operator's webhook wants Workers for one), so a restarted pod rejoins; static: one
    Master and the rest Workers, as the operator's static rendezvous needs; one node: a Master."""
    job = manifests["four-gpu-nodes"]["launch/pytorchjob.yaml"]["spec"]
    assert list(job["pytorchReplicaSpecs"]) == ["Worker"]
    assert job["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    assert job["elasticPolicy"] == {
        "rdzvBackend": "c10d", "rdzvPort": 29400, "rdzvId": "proj",
        "minReplicas": 4, "maxReplicas": 4, "maxRestarts": 3,
    }  # fmt: skip
    assert job["nprocPerNode"] == "8"
    [container] = job["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert container["image"] == "ghcr.io/your-org/proj:latest"  # the default the README names
    static = manifests["hf-two-nodes"]["launch/pytorchjob.yaml"]["spec"]
    assert "elasticPolicy" not in static
    replicas = static["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    one = manifests["one-cpu-node"]["launch/pytorchjob.yaml"]["spec"]
    assert list(one["pytorchReplicaSpecs"]) == ["Master"] and "elasticPolicy" not in one


def _pods(manifests, variant):
    """(pod spec, the training container) of every pod template in both manifests."""
    job = manifests[variant]["launch/pytorchjob.yaml"]["spec"]["pytorchReplicaSpecs"]
    for replica in job.values():
        pod = replica["template"]["spec"]
        yield pod, pod["containers"][0]
    trainjob = manifests[variant]["launch/trainjob.yaml"]["spec"]
    [patch] = trainjob["runtimePatches"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"  # the torch-distributed runtime's job and container
    pod = node["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["name"] == "node"
    yield pod, {**container, "env": trainjob["trainer"]["env"]}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_pod_has_shm_and_the_runs_volume_over_its_outputs_and_caches(manifests, variant):
    """/dev/shm in memory (the TrainJob had none: 64 MiB, DataLoader workers die), and the
    run's ReadWriteMany claim mounted where train.py writes by default and where the caches
    are, so that a restarted pod (a clean filesystem) resumes."""
    claim = manifests[variant][VOLUME]
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pods = list(_pods(manifests, variant))
    assert len(pods) >= 2
    for pod, container in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
        assert volumes["run"]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/dev/shm"]["name"] == "dshm"
        assert mounts["/workspace/checkpoints"] == {
            "name": "run", "mountPath": "/workspace/checkpoints", "subPath": "checkpoints"
        }  # fmt: skip
        assert mounts["/workspace/runs"]["name"] == "run"
        env = {e["name"]: e["value"] for e in container["env"]}
        for cache in (env["HF_HOME"], env["TORCH_HOME"]):
            [mount] = [m for path, m in mounts.items() if cache.startswith(path + "/")]
            assert mount["name"] == "run"
        assert pod["terminationGracePeriodSeconds"] == 120


def test_the_volume_takes_the_size_and_class_asked_for_or_the_clusters_default(manifests):
    asked = manifests["hf-two-nodes"][VOLUME]["spec"]
    assert asked["resources"]["requests"]["storage"] == "2Ti"
    assert asked["storageClassName"] == "nfs-client"
    default = manifests["one-cpu-node"][VOLUME]["spec"]
    assert default["resources"]["requests"]["storage"] == "200Gi"
    assert "storageClassName" not in default  # absent, not "": "" would mean no class


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_dockerfile_builds_what_the_manifests_run(manifests, variant):
    """Read as a linter would: the project's Python, the torch pins first, the requirements,
    the project at the pods' working directory, the pods' own command."""
    import json

    lines = [x for x in manifests[variant]["Dockerfile"].splitlines() if x and x[0] != "#"]
    answers = VARIANTS[variant]
    assert lines[0] == f"FROM python:{MACHINE.python}-slim"
    replicas = manifests[variant]["launch/pytorchjob.yaml"]["spec"]["pytorchReplicaSpecs"]
    job = next(iter(replicas.values()))
    [container] = job["template"]["spec"]["containers"]
    assert f"WORKDIR {container['workingDir']}" in lines
    run = lines.index("COPY requirements-torch.txt requirements.txt ./") + 1
    assert lines[run].startswith("RUN pip install -r requirements-torch.txt")
    cpu_wheels = "--index-url https://download.pytorch.org/whl/cpu" in lines[run]
    assert cpu_wheels == (not answers.get("gpus_per_node"))
    assert lines[run + 1].strip() == "&& pip install -r requirements.txt"
    assert lines.index("COPY . .") > run
    assert lines[-1].startswith("CMD ")
    assert json.loads(lines[-1][4:]) == container["command"]
    trainjob = manifests[variant]["launch/trainjob.yaml"]["spec"]["trainer"]
    assert trainjob["command"] == container["command"]


def test_names_become_valid_kubernetes_object_names(manifests):
    spec = build_spec({"name": "My_Proj.v2", "scheduler": "kubernetes"}, MACHINE)
    assert kubernetes_name(spec) == "my-proj-v2"
    trainjob = manifests["lightning-odd-name"]["launch/trainjob.yaml"]
    assert trainjob["spec"]["trainer"]["image"] == "registry.example.com/team/proj:1.0"
    assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"


def test_manifests_are_written_only_for_kubernetes_projects():
    files = engine.render(build_spec({"name": "p", "scheduler": "none"}, MACHINE))
    assert not any(path.endswith(".yaml") for path in files)
    assert "launch/slurm.sbatch" not in files


def test_pods_ask_for_the_cpus_slurm_would_and_get_time_to_checkpoint(manifests):
    """The same CPUs as launch/slurm.sbatch's --cpus-per-task for the same answers (train.py
    sizes its DataLoader workers from them), and where train.py checkpoints on SIGTERM
    itself (every framework), the preemption notice as grace period."""
    answers = VARIANTS["four-gpu-nodes"]
    slurm = engine.render(build_spec({"name": "proj", **answers, "scheduler": "slurm"}, MACHINE))
    sbatch = slurm["launch/slurm.sbatch"].decode().splitlines()
    [cpus] = [line for line in sbatch if line.startswith("#SBATCH --cpus-per")]
    job = manifests["four-gpu-nodes"]
    for replica in job["launch/pytorchjob.yaml"]["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        [container] = pod["containers"]
        assert cpus == f"#SBATCH --cpus-per-task={container['resources']['requests']['cpu']}"
        assert container["resources"]["requests"]["cpu"] == 32  # 4 for each of 8 GPUs
        assert pod["terminationGracePeriodSeconds"] == 120
    trainer = job["launch/trainjob.yaml"]["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["requests"]["cpu"] == 32
    hf = manifests["hf-two-nodes"]["launch/pytorchjob.yaml"]["spec"]  # the Trainer's callback
    assert (
        hf["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["terminationGracePeriodSeconds"]
        == 120
    )
    lightning = manifests["lightning-odd-name"]["launch/pytorchjob.yaml"]["spec"]
    pod = lightning["pytorchReplicaSpecs"]["Master"]["template"]["spec"]  # its callback
    assert pod["terminationGracePeriodSeconds"] == 120
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == 8  # 2 GPUs
