"""Where a project runs: the scheduler, and the answers only SLURM or Kubernetes projects
have (declared as the other fields are; :mod:`genie.spec.questions` places them)."""

from __future__ import annotations

from collections.abc import Callable

from genie.detect import Machine
from genie.i18n import _
from genie.spec.fields import (
    Answers,
    Field,
    check_image,
    check_k8s_name,
    check_quantity,
    check_slurm_name,
    check_slurm_time,
)


def _const(value: object) -> Callable[[Answers, Machine], object]:
    return lambda answers, machine: value


def _default_scheduler(answers: Answers, machine: Machine) -> str:
    return "slurm" if machine.slurm else "none"


def slurm(answers: Answers) -> bool:
    return answers.get("scheduler") == "slurm"


def kubernetes(answers: Answers) -> bool:
    return answers.get("scheduler") == "kubernetes"


SCHEDULER_CHOICES = {
    "none": _("no scheduler: run launch/ scripts on each node yourself"),
    "slurm": _("SLURM: sbatch launch/slurm.sbatch"),
    "kubernetes": _("Kubernetes with Kubeflow: kubectl apply -f launch/pytorchjob.yaml"),
}
_NOT_SLURM = _("only applies to --scheduler slurm")
_NOT_KUBERNETES = _("only applies to --scheduler kubernetes")
# The README names it; the pods need the project's code, so users build their own.
DEFAULT_IMAGE = "ghcr.io/your-org/{name}:latest"


def _slurm_field(name: str, question: str, help: str, check: Callable[[str], str | None]) -> Field:
    """An optional #SBATCH setting: empty means the cluster's own default."""
    return Field(
        name,
        str,
        question,
        help,
        default=_const(None),
        check=check,
        applies=slurm,
        optional=True,
        not_applicable=_NOT_SLURM,
    )


SCHEDULER = Field(
        "scheduler", str, _("Cluster scheduler?"),
        _("slurm writes launch/slurm.sbatch; kubernetes writes Kubeflow manifests; none: "
          "start each node yourself."),
        default=_default_scheduler, choices=("none", "slurm", "kubernetes"),
        choice_help=SCHEDULER_CHOICES,
    )  # fmt: skip

CLUSTER_FIELDS: tuple[Field, ...] = (
    _slurm_field(
        "partition", _("SLURM partition (empty: the cluster's default)?"),
        _("Passed as #SBATCH --partition only when given."), check_slurm_name,
    ),
    _slurm_field(
        "account", _("SLURM account (empty: your default)?"),
        _("Passed as #SBATCH --account only when given."), check_slurm_name,
    ),
    _slurm_field(
        "time", _("SLURM time limit (empty: the partition's default)?"),
        _("Passed as #SBATCH --time only when given, e.g. 04:00:00."), check_slurm_time,
    ),
    Field(
        "image", str, _("Container image with the project and its requirements?"),
        _("The image the Kubernetes pods run; build it from requirements.txt and this folder."),
        default=lambda answers, machine: DEFAULT_IMAGE.format(
            name=str(answers.get("name") or "train").lower()),
        check=check_image, applies=kubernetes, not_applicable=_NOT_KUBERNETES,
    ),
    Field(
        "storage_size", str, _("Size of the run's volume (checkpoints, logs, model cache)?"),
        _("The PersistentVolumeClaim in launch/volume.yaml: a restarted pod resumes from it. "
          "Room for --keep + 2 checkpoints and the model cache."),
        default=_const("200Gi"), check=check_quantity, applies=kubernetes,
        not_applicable=_NOT_KUBERNETES,
    ),
    Field(
        "storage_class", str,
        _("Storage class of the run's volume (empty: the cluster's default)?"),
        _("Every pod mounts the volume at once (ReadWriteMany): a class such as NFS, CephFS, "
          "Lustre, EFS or Filestore (kubectl get storageclass)."),
        default=_const(None), check=check_k8s_name, applies=kubernetes, optional=True,
        not_applicable=_NOT_KUBERNETES,
    ),
)  # fmt: skip
