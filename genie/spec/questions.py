"""The field table: every answer genie asks for, declared once (type, choices, default,
help, checks, when it applies). The wizard and the flags are generated from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from genie import compat, contract, i18n
from genie.detect import Machine
from genie.i18n import _
from genie.registry import FRAMEWORKS, STRATEGIES, TASKS
from genie.spec import gpus
from genie.spec.cluster import CLUSTER_FIELDS, SCHEDULER, kubernetes
from genie.spec.fields import (
    Answers,
    Field,
    check_master_addr,
    check_name,
    check_python,
    normalize_minor,
)


def _multi_node(answers: Answers) -> bool:
    return int(answers.get("nodes") or 1) > 1


def _default_scheduler(answers: Answers, machine: Machine) -> str:
    return "slurm" if machine.slurm else "none"


def _multi_node_by_hand(answers: Answers) -> bool:
    """Several nodes that meet at an address genie writes down: on Kubernetes the operator
    gives the pods the master's address and port."""
    return _multi_node(answers) and not kubernetes(answers)


# ---------------------------------------------------------------- defaults


def _default_torch(answers: Answers, machine: Machine) -> str:
    if machine.torch:
        installed = normalize_minor(machine.torch.split("+")[0])
        if installed in compat.SUPPORTED:
            return installed
    return compat.NEWEST


def _nearest_python(python: str, answers: Answers) -> str | None:
    """The Python version the chosen torch supports nearest to ``python``."""
    if not answers.get("torch"):
        return None
    release = compat.release(str(answers["torch"]))
    py = compat.parse_minor(str(python))
    return compat.format_minor(min(max(py, release.python_min), release.python_max))


def _default_nproc(answers: Answers, machine: Machine) -> int:
    return int(answers.get("gpus_per_node") or 0) or contract.CPU_PROCESSES


def _on_gpus(answers: Answers) -> bool:
    return bool(answers.get("gpus_per_node"))


def _detected_gpu_memory(answers: Answers, machine: Machine) -> str | None:
    return gpus.as_answer(machine.gpu_memory) if machine.gpu_memory else None


def _default_precision(answers: Answers, machine: Machine) -> str:
    return "bf16" if answers.get("gpus_per_node") else "fp32"


def _task_default(attribute: str) -> Callable[[Answers, Machine], Any]:
    """A default that depends on the task: the registry's entry for it."""
    return lambda answers, machine: getattr(TASKS[str(answers.get("task") or "custom")], attribute)


def _const(value: Any) -> Callable[[Answers, Machine], Any]:
    return lambda answers, machine: value


# ---------------------------------------------------------------- the fields

TASK_CHOICES = {key: task.summary for key, task in TASKS.items()}
FRAMEWORK_CHOICES = {key: f.summary for key, f in FRAMEWORKS.items()}
TORCH_CHOICES = {minor: _("not verified by genie yet") for minor in compat.UNVERIFIED}
TORCH_MARKS = {minor: _("unverified") for minor in compat.UNVERIFIED}
TORCH_WARNINGS = {
    minor: _(
        "torch {v} is not verified by genie yet: the code follows its announced APIs; "
        "run the smoke test on that version before a long job"
    ).format(v=minor)
    for minor in compat.UNVERIFIED
}


_NOT_BY_HAND = _(
    "only applies to multi-node projects (--nodes 2 or more) outside Kubernetes, where the "
    "operator sets the master's address and port"
)
_DP_ONE_PROCESS = _("does not apply to --framework dp, which runs one process")


def _master_default(answers: Answers, machine: Machine) -> str | None:
    """This machine's hostname, unless it resolves here to loopback only (the other nodes
    would be told to meet at 127.0.x.x: genie doctor fails that, so genie new offers none)."""
    return None if machine.hostname_loopback else machine.hostname


def _no_master_default(machine: Machine) -> tuple[str, str]:
    return machine.hostname, _(
        "the default, this machine's hostname, resolves here to {a} (loopback), which the "
        "other nodes cannot reach; pass --master-addr with node 0's IP as the other nodes "
        "see it (ip -4 addr on node 0)"
    ).format(a=", ".join(machine.hostname_addresses or ()))


def _torchrun(answers: Answers) -> bool:
    return FRAMEWORKS[str(answers.get("framework"))].torchrun


FIELDS: tuple[Field, ...] = (
    Field(
        "name", str, _("Project name"),
        _("Used for the README title and the rendezvous id; defaults to the directory name."),
        default=_const(None), check=check_name,
    ),
    Field(
        "nodes", int, _("How many nodes (machines)?"),
        _("Each node runs one torchrun; 1 keeps everything on this machine."),
        default=_const(1), minimum=1, maximum=4096,
    ),
    SCHEDULER,
    Field(
        "master_addr", str, _("Master address (node 0's hostname or IP)?"),
        _("Every node connects here to find the others; it must be reachable from all nodes."),
        default=_master_default, check=check_master_addr, applies=_multi_node_by_hand,
        not_applicable=_NOT_BY_HAND,
        no_default=_no_master_default,
    ),
    Field(
        "master_port", int, _("Master port?"),
        _("A free TCP port on the master node, open to the other nodes."),
        default=_const(29500), minimum=1024, maximum=65535, applies=_multi_node_by_hand,
        not_applicable=_NOT_BY_HAND,
    ),
    Field(
        "rdzv", str, _("Rendezvous backend?"),
        _("c10d: after a failure torchrun restarts every worker and training resumes from the "
          "last checkpoint; static needs fixed node ranks and stops on a failure."),
        default=_const("c10d"), choices=("c10d", "static"), applies=_multi_node,
    ),
    Field(
        "gpus_per_node", int, _("GPUs per node?"),
        _("0 trains on CPU with the gloo backend; GPUs use NCCL, one process per GPU."),
        default=lambda answers, machine: machine.gpus, minimum=0, maximum=64,
    ),
    Field(
        "gpu_memory", str, _("Memory of each GPU (empty: not known)?"),
        _("A size such as 80GiB, or a GPU such as H100: genie then says whether the model "
          "fits (genie plan)."),
        default=_detected_gpu_memory, check=gpus.check_gpu_memory, optional=True,
        applies=_on_gpus, not_applicable=_("only applies with GPUs (--gpus-per-node 1 or more)"),
    ),
    Field(
        "torch", str, _("PyTorch version?"),
        _("The version your cluster runs; the generated code uses only its APIs."),
        default=_default_torch, choices=compat.SUPPORTED, normalize=normalize_minor,
        choice_help=TORCH_CHOICES, marks=TORCH_MARKS, warnings=TORCH_WARNINGS,
    ),
    Field(
        "python", str, _("Python version on the cluster?"),
        _("Decides which torch versions and features can work; defaults to this Python."),
        default=lambda answers, machine: machine.python, check=check_python,
        normalize=normalize_minor, nearest=_nearest_python,
    ),
    Field(
        "task", str, _("Task?"),
        _("The model and data; every framework shares the same task code."),
        default=_const("custom"), choices=tuple(TASKS), choice_help=TASK_CHOICES,
    ),
    Field(
        "framework", str, _("Framework?"),
        _("Who runs the training loop; all of them launch with torchrun except dp."),
        default=_const("ddp"), choices=tuple(FRAMEWORKS), choice_help=FRAMEWORK_CHOICES,
        warnings={k: f.warning for k, f in FRAMEWORKS.items() if f.warning},
    ),
    Field(
        "strategy", str, _("Parallel strategy?"),
        _(
            "ddp keeps a full model copy per process; fsdp shards it, for models too big for "
            "one; hsdp shards it within each node and replicates it across nodes."
        ),
        default=_const("ddp"), choices=tuple(STRATEGIES), choice_help=STRATEGIES,
        applies=_torchrun, not_applicable=_DP_ONE_PROCESS,
    ),
    Field(
        "nproc_per_node", int, _("Processes per node?"),
        _("One process per GPU is the rule; defaults to the GPU count, or 2 on CPU."),
        default=_default_nproc, minimum=1, maximum=256, applies=_torchrun,
        not_applicable=_DP_ONE_PROCESS,
    ),
    Field(
        "precision", str, _("Precision?"),
        _("bf16 needs no loss scaling; fp16 needs a GPU and a GradScaler; fp32 is the baseline."),
        default=_default_precision, choices=("bf16", "fp16", "fp32"),
    ),
    Field(
        "batch_size", int, _("Batch size per process?"),
        _("Global batch = batch size x processes x accumulation steps."),
        default=_task_default("batch_size"), minimum=1, maximum=1_000_000,
    ),
    Field(
        "grad_accum", int, _("Gradient accumulation steps?"),
        _("Gradients are all-reduced only on the last micro-step (no_sync on the others)."),
        default=_const(1), minimum=1, maximum=10_000,
    ),
    Field(
        "epochs", int, _("Epochs?"), _("Passes over the training data."),
        default=_const(3), minimum=1, maximum=1_000_000,
    ),
    Field(
        "lr", float, _("Learning rate?"),
        _("AdamW learning rate; the nlp and llm tasks fine-tune a pretrained transformer, "
          "at a smaller one."),
        default=_task_default("lr"), minimum=1e-12, maximum=10,
    ),
    Field(
        "compile", bool, _("Use torch.compile?"),
        _("Compiles the model for speed (torch 2.0+); the first steps are slower."),
        default=_const(False),
    ),
    Field(
        "activation_checkpointing", bool, _("Use activation checkpointing?"),
        _("Keeps only each block's input in forward and recomputes the rest in backward: "
          "less activation memory, more compute."),
        default=_const(False), applies=_torchrun, not_applicable=_DP_ONE_PROCESS,
    ),
    Field(
        "tracker", str, _("Experiment tracker?"),
        _("Where rank 0 logs loss, accuracy, learning rate, throughput; TensorBoard is offline."),
        default=_const("tensorboard"), choices=tuple(compat.TRACKER_PACKAGES),
    ),
    Field(
        "seed", int, _("Random seed?"),
        _("Seeds Python and torch; every rank starts from the same weights."),
        default=_const(42), minimum=0, maximum=2**32 - 1,
    ),
    *CLUSTER_FIELDS,
    Field(
        "docs_lang", str, _("Language of the project's README?"),
        _("en writes README.md; zh adds README.zh-CN.md (code, comments and logs stay English)."),
        default=lambda answers, machine: i18n.current(), choices=i18n.LANGUAGES,
    ),
)  # fmt: skip

FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
# Keys an answers file may carry besides the fields (written by genie itself).
META_KEYS = ("genie_version", "files")
