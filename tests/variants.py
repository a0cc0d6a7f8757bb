"""Named project variants used by render, golden and e2e tests."""

from __future__ import annotations

from genie import registry

TOPOLOGIES: dict[str, dict] = {
    "cpu-default": {},
    "gpu8-bf16-compile": {"gpus_per_node": 8, "compile": True, "grad_accum": 4},
    "multinode-c10d": {"nodes": 4, "gpus_per_node": 8, "master_addr": "gpu-node-0.cluster"},
    "multinode-static": {
        "nodes": 2, "gpus_per_node": 4, "master_addr": "10.0.0.1", "master_port": 23456,
        "rdzv": "static", "precision": "fp16",
    },
    "torch1.13-py3.10": {"torch": "1.13", "python": "3.10", "gpus_per_node": 2, "precision": "fp16"},
    "torch2.2-fp16": {"torch": "2.2", "gpus_per_node": 2, "precision": "fp16"},
    "tracker-none-lightning": {"tracker": "none", "framework": "lightning"},
    "tracker-wandb-ddp": {"tracker": "wandb", "task": "cv"},
    "tracker-mlflow-hf": {"tracker": "mlflow", "framework": "hf"},
    "slurm-ddp": {"scheduler": "slurm", "nodes": 2, "gpus_per_node": 4, "master_addr": "gpu-01",
                  "partition": "gpu", "account": "ml", "time": "04:00:00"},
    "slurm-lightning": {"scheduler": "slurm", "framework": "lightning", "gpus_per_node": 2},
    "k8s-gpu": {"scheduler": "kubernetes", "nodes": 2, "gpus_per_node": 8},
}  # fmt: skip

FRAMEWORKS = tuple(registry.FRAMEWORKS)
TASKS = tuple(registry.TASKS)
# Every framework x task it is written for; ddp x custom is cpu-default above.
COMBOS: dict[str, dict] = {
    f"{framework}-{task}": {"framework": framework, "task": task}
    for framework in FRAMEWORKS
    for task in TASKS
    if registry.TASKS[task].frameworks is None or framework in registry.TASKS[task].frameworks
}

# FSDP: FSDP2 (fully_shard) from torch 2.6, FSDP1 for 2.2-2.5; every task's shard units.
FSDP: dict[str, dict] = {
    "fsdp-ddp-custom": {"strategy": "fsdp"},
    "fsdp-ddp-cv": {"strategy": "fsdp", "task": "cv"},
    "fsdp-ddp-nlp": {"strategy": "fsdp", "task": "nlp"},
    "fsdp-ddp-llm": {"strategy": "fsdp", "task": "llm"},
    "fsdp-lightning-gpu": {"strategy": "fsdp", "framework": "lightning", "gpus_per_node": 8},
    "fsdp-hf-gpu": {"strategy": "fsdp", "framework": "hf", "gpus_per_node": 8},
    "fsdp1-torch2.4-gpu": {
        "strategy": "fsdp", "torch": "2.4", "python": "3.11", "gpus_per_node": 4,
    },
    # HSDP: nodes x processes per node; FSDP2, and FSDP1's HYBRID_SHARD
    "hsdp-2nodes": {"strategy": "hsdp", "nodes": 2, "master_addr": "10.0.0.1"},
    "hsdp1-torch2.4-gpu": {
        "strategy": "hsdp", "torch": "2.4", "python": "3.11", "gpus_per_node": 4, "nodes": 2,
        "master_addr": "10.0.0.1",
    },
}  # fmt: skip

# README.zh-CN.md (docs_lang zh) on the branches its text depends on.
CHINESE: dict[str, dict] = {
    "zh-slurm-multinode": {"docs_lang": "zh", "scheduler": "slurm", "nodes": 2,
                           "gpus_per_node": 4, "master_addr": "gpu-01"},
    "zh-k8s-fsdp-hf": {"docs_lang": "zh", "scheduler": "kubernetes", "framework": "hf",
                       "strategy": "fsdp", "gpus_per_node": 8},
    "zh-hsdp": {"docs_lang": "zh", "strategy": "hsdp", "nodes": 2, "master_addr": "10.0.0.1"},
    "zh-dp-cv": {"docs_lang": "zh", "framework": "dp", "task": "cv"},
    "zh-llm": {"docs_lang": "zh", "task": "llm"},
    "zh-lightning-nlp-static": {"docs_lang": "zh", "framework": "lightning", "task": "nlp",
                                "nodes": 2, "master_addr": "10.0.0.1", "rdzv": "static"},
}  # fmt: skip

VARIANTS: dict[str, dict] = {
    **TOPOLOGIES,
    **CHINESE,
    **{k: v for k, v in COMBOS.items() if k != "ddp-custom"},
    **FSDP,
}
