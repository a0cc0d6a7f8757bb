"""Named project variants used by render, golden and e2e tests."""

from __future__ import annotations

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
}  # fmt: skip

FRAMEWORKS = ("ddp", "lightning", "hf", "dp")
TASKS = ("custom", "nlp", "cv")
# Every framework x task; ddp x custom is cpu-default above.
COMBOS: dict[str, dict] = {
    f"{framework}-{task}": {"framework": framework, "task": task}
    for framework in FRAMEWORKS
    for task in TASKS
}

VARIANTS: dict[str, dict] = {**TOPOLOGIES, **{k: v for k, v in COMBOS.items() if k != "ddp-custom"}}
