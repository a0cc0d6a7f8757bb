"""Everything the templates see, computed once from the spec (pure).

The templates read it as ``g``: the spec's answers (``g.torch``, ``g.nodes``, ...) and the
fields of :class:`Context`. Facts a template branches on are computed here, once, rather
than spelled out as expressions in several templates.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from genie import __version__, compat, contract
from genie.generate import launch, manifests, preemption
from genie.generate.catalogue import framework_title, project_files
from genie.i18n import Translations, translations
from genie.registry import FRAMEWORKS, TASKS, Framework, Task
from genie.spec import Spec


@dataclass(frozen=True)
class Words:
    """What a README says in words, in one language."""

    framework_title: str
    task_title: str
    fsdp_gpu_only: str | None  # why this project's FSDP cannot run on CPU, or None
    commands: list[dict[str, str]]  # where, script, shell: one per machine that launches
    files: list[tuple[str, str]]  # path, what it is for


@dataclass(frozen=True)
class Install:
    cluster: str  # the cluster's torch and the rest
    rest: str  # everything but torch, into an environment that has one


@dataclass(frozen=True)
class Launch:
    single_node: str
    multi_node: str | None
    slurm: str
    prepare: str  # the batch script's data step
    sbatch: list[str]
    network: bool  # launch/network.sh finds each node's address and interface
    srun_tasks: bool  # under SLURM, srun starts every process (no torchrun per node)
    relay_ctrl_c: bool  # the launch scripts pass Ctrl-C on to the workers
    shutdown_timeout: int | None  # torchrun's wait for its workers after a SIGTERM, if set


@dataclass(frozen=True)
class Context(Words):
    """The templates' ``g``, besides the spec's answers; :func:`context` builds it."""

    fw: Framework  # the framework's registry entry: what shared templates may branch on
    tk: Task  # the task's registry entry, likewise
    genie_version: str
    marker: str
    features: dict[str, bool]  # what the chosen torch has (compat.FEATURES)
    libs: dict[str, bool]  # what the pinned libraries have
    fused_adamw: bool  # AdamW fused into one kernel per step on GPUs: torch and framework
    requirements_torch: list[str]  # requirements-torch.txt: the cluster's torch
    requirements: list[str]  # requirements.txt: the rest
    requirements_test: list[str]  # requirements-test.txt: what tests/ adds
    install: Install
    zh: Words | None  # the README's words in Chinese, with --docs-lang zh
    wrapper: str  # what wraps the model, named in comments
    world_size: int
    global_batch: int
    multi_node: bool
    multi_node_script: bool  # launch/multi_node.sh starts the nodes (not Kubernetes' operator)
    on_gpus: bool  # planned for GPUs (NCCL); False: CPU processes (gloo)
    faulty_rank: int  # the rank the README's GENIE_FAULT examples fail (0 without torchrun)
    has_optim_module: bool  # optim.py builds the optimizer (not the Trainer)
    records_hangs: bool  # hang.py: Flight Recorder, stacks and heartbeats per rank
    # every rank writes its shards into a folder per step (checkpoint.py, FSDP)
    sharded_checkpoints: bool
    sharded: bool  # the model is sharded: --strategy fsdp or hsdp (fsdp.py)
    last_checkpoint: str  # the checkpoint a run resumes from, as the README names it
    max_restarts: int
    slurm_port_base: int
    slurm_notice: int
    cpus_per_process: int
    launch: Launch
    manifests: dict[str, str] | None  # the Kubernetes manifests' texts
    k8s_workdir: str  # where the image holds the project (Dockerfile, manifests)
    k8s_command: str  # the pods' command, as the Dockerfile's CMD (JSON)
    k8s_elastic: bool  # the PyTorchJob's pods rejoin under an elastic policy


def context(spec: Spec) -> dict[str, Any]:
    """Everything the templates see: the spec's answers and :func:`build`'s fields, as the
    plain mapping cookiecutter takes (and keeps in its replay file)."""
    return {**asdict(spec), **asdict(build(spec))}  # answers that do not apply are None


def build(spec: Spec) -> Context:
    fw = FRAMEWORKS[spec.framework]
    torch_lines, rest = compat.split_torch(
        compat.requirements(spec.torch, spec.python, spec.framework, spec.task, spec.tracker)
    )
    features = compat.features(spec.torch)
    sharded = spec.sharded and "checkpoint.py" in fw.modules
    return Context(
        **asdict(_words(spec, translations("en"))),  # README.md
        fw=fw,
        tk=TASKS[spec.task],
        genie_version=__version__,
        marker=contract.MARKER,
        features=features,
        libs=compat.library_features(spec.torch, spec.python),
        fused_adamw=features["fused_adamw"] and fw.fused_optimizer,
        requirements_torch=torch_lines,
        requirements=rest,
        requirements_test=list(compat.TEST_LINES),
        install=Install(compat.install_command(), compat.install_command(torch=False)),
        zh=_words(spec, translations("zh")) if spec.docs_lang == "zh" else None,
        wrapper="FSDP" if spec.sharded else fw.wrapper,
        world_size=spec.world_size,
        global_batch=spec.global_batch,
        multi_node=spec.multi_node,
        multi_node_script=spec.multi_node_script,
        on_gpus=spec.gpus_per_node > 0,
        faulty_rank=1 if fw.torchrun else 0,
        has_optim_module="optim.py" in fw.modules,
        records_hangs="hang.py" in fw.modules,
        sharded_checkpoints=sharded,
        sharded=spec.sharded,
        last_checkpoint="checkpoints/step-N/" if sharded else fw.last_checkpoint,
        max_restarts=launch.ELASTIC_MAX_RESTARTS,
        slurm_port_base=launch.SLURM_PORT_BASE,
        slurm_notice=preemption.PREEMPTION_NOTICE,
        cpus_per_process=launch.cpus_per_process(spec),
        launch=_launch(spec),
        manifests=manifests.texts(spec) if spec.scheduler == "kubernetes" else None,
        k8s_workdir=manifests.K8S_WORKDIR,
        k8s_command=json.dumps(manifests.COMMAND),
        k8s_elastic=manifests.elastic(spec),
    )


def _launch(spec: Spec) -> Launch:
    return Launch(
        single_node=launch.script_line(spec, launch.single_node_args(spec)),
        multi_node=(
            launch.script_line(spec, launch.multi_node_args(spec))
            if spec.multi_node_script
            else None
        ),
        slurm=launch.shell_join(launch.slurm_args(spec)),
        prepare=launch.shell_join(launch.PREPARE_STEP),
        sbatch=launch.sbatch_directives(spec),
        network=launch.needs_network_script(spec),
        srun_tasks=launch.slurm_uses_srun_tasks(spec),
        relay_ctrl_c=launch.relays_ctrl_c(spec),
        shutdown_timeout=preemption.shutdown_timeout(spec),
    )


def _words(spec: Spec, tr: Translations) -> Words:
    """What a README says in words, in ``tr``'s language."""
    return Words(
        framework_title=framework_title(spec, tr),
        task_title=tr.gettext(TASKS[spec.task].title),
        fsdp_gpu_only=(
            compat.fsdp_needs_gpus(spec.framework, spec.torch, tr) if spec.sharded else None
        ),
        commands=[
            {"where": c.where, "script": c.script, "shell": c.shell}
            for c in launch.commands(spec, tr)
        ],
        files=project_files(spec, tr),
    )
