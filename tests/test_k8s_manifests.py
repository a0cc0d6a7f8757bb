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
VARIANTS = {
    "one-cpu-node": {"gpus_per_node": 0},
    "four-gpu-nodes": {"nodes": 4, "master_addr": "gpu-01", "gpus_per_node": 8},
    "lightning-odd-name": {"name": "My_Proj.v2", "framework": "lightning", "gpus_per_node": 2,
                           "image": "registry.example.com/team/proj:1.0"},
    "hf-two-nodes": {"framework": "hf", "nodes": 2, "master_addr": "gpu-01", "gpus_per_node": 4},
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
        result[variant] = {path: yaml.safe_load(files[path]) for path in CRDS}
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


def test_pytorchjob_has_a_master_and_the_other_nodes_as_workers_with_gpus_and_shm(manifests):
    job = manifests["four-gpu-nodes"]["launch/pytorchjob.yaml"]["spec"]
    replicas = job["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    assert job["nprocPerNode"] == "8"
    pod = replicas["Worker"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert container["image"] == "ghcr.io/your-org/proj:latest"  # the default the README names
    one = manifests["one-cpu-node"]["launch/pytorchjob.yaml"]["spec"]["pytorchReplicaSpecs"]
    assert list(one) == ["Master"]


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
