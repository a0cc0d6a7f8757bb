"""Everything the templates see, computed once from the spec (pure)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from genie import __version__, compat, contract
from genie.generate import launch, manifests
from genie.generate.catalogue import framework_title, project_files
from genie.i18n import Translations, translations
from genie.registry import FRAMEWORKS, TASKS
from genie.spec import Spec


def context(spec: Spec) -> dict[str, Any]:
    """Everything the templates see, computed once from the spec."""
    torch_lines, rest = compat.split_torch(
        compat.requirements(spec.torch, spec.python, spec.framework, spec.task, spec.tracker)
    )
    features = compat.features(spec.torch)
    return {
        **asdict(spec),  # fields that do not apply are None
        # the framework's registry entry: what shared templates may branch on (torchrun,
        # trainer); what only one framework does lives in its templates' folder
        "fw": asdict(FRAMEWORKS[spec.framework]),
        "genie_version": __version__,
        "marker": contract.MARKER,
        "features": features,
        # AdamW fused into one kernel per step on GPUs: the torch version and the framework
        "fused_adamw": features["fused_adamw"] and FRAMEWORKS[spec.framework].fused_optimizer,
        "libs": compat.library_features(spec.torch, spec.python),
        # the cluster's torch in requirements-torch.txt, the rest in requirements.txt
        "requirements_torch": torch_lines,
        "requirements": rest,
        "install": {
            "cluster": compat.install_command(),
            "rest": compat.install_command(torch=False),
        },
        **_texts(spec, translations("en")),  # README.md
        "zh": _texts(spec, translations("zh")) if spec.docs_lang == "zh" else None,
        "wrapper": "FSDP" if spec.strategy == "fsdp" else FRAMEWORKS[spec.framework].wrapper,
        "world_size": spec.world_size,
        "global_batch": spec.global_batch,
        "max_restarts": launch.ELASTIC_MAX_RESTARTS,
        "slurm_port_base": launch.SLURM_PORT_BASE,
        "slurm_notice": launch.PREEMPTION_NOTICE,
        "cpus_per_process": launch.cpus_per_process(spec),
        "launch": {
            "single_node": launch.shell_join(launch.single_node_args(spec)),
            "multi_node": (
                launch.shell_join(launch.multi_node_args(spec)) if spec.multi_node else None
            ),
            "slurm": launch.shell_join(launch.slurm_args(spec)),
            "sbatch": launch.sbatch_directives(spec),
            "network": launch.needs_network_script(spec),
            "srun_tasks": launch.slurm_uses_srun_tasks(spec),
        },
        "manifests": manifests.texts(spec) if spec.scheduler == "kubernetes" else None,
    }


def _texts(spec: Spec, tr: Translations) -> dict[str, Any]:
    """What a README says in words, in ``tr``'s language."""
    return {
        "framework_title": framework_title(spec, tr),
        "task_title": tr.gettext(TASKS[spec.task].title),
        # why this project's FSDP cannot run on CPU (its own tests skip there), or None
        "fsdp_gpu_only": (
            compat.fsdp_needs_gpus(spec.framework, spec.torch, tr)
            if spec.strategy == "fsdp"
            else None
        ),
        "commands": [
            {"where": c.where, "script": c.script, "shell": c.shell}
            for c in launch.commands(spec, tr)
        ],
        "files": project_files(spec, tr),
    }
