"""Spec -> the exact commands that launch the generated project. Pure: nothing runs here."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from genie.registry import FRAMEWORKS
from genie.spec import Spec

ENTRYPOINT = "train.py"
NODE_RANK_VAR = "$NODE_RANK"  # placeholder the multi-node script fills from its argument
ELASTIC_MAX_RESTARTS = 3


@dataclass(frozen=True)
class Command:
    where: str  # which machine runs it, in words
    script: str  # the launch script call, e.g. "bash launch/multi_node.sh 1"
    argv: tuple[str, ...]  # what the script executes


# torchrun flags are spelled with underscores: the only spelling torch 1.x knows.


def standalone(nproc: int, torchrun: Sequence[str] = ("torchrun",)) -> list[str]:
    """torchrun for ``nproc`` processes on one machine; --standalone runs a private
    rendezvous on a free port. ``torchrun`` may be spelled ``python -m torch.distributed.run``."""
    return [*torchrun, "--standalone", f"--nproc_per_node={nproc}"]


def torchrun_args(
    entrypoint: str,
    nproc_per_node: int,
    nodes: int = 1,
    *,
    master_addr: str | None = None,
    master_port: int | None = None,
    rdzv: str = "static",
    rdzv_id: str | None = None,
    node_rank: int | str = NODE_RANK_VAR,
) -> list[str]:
    """torchrun for ``entrypoint``: --standalone on one node; on several, c10d (every node
    runs the same elastic command) or static (each node passes its own rank)."""
    if nodes <= 1:
        return [*standalone(nproc_per_node), entrypoint]
    args = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={nproc_per_node}"]
    if rdzv == "c10d":
        # Every node runs the same command; c10d assigns node ranks and, with max_restarts,
        # re-forms the group when a worker dies (train.py resumes from the last checkpoint).
        args += [
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={master_addr}:{master_port}",
            f"--rdzv_id={rdzv_id}",
            f"--max_restarts={ELASTIC_MAX_RESTARTS}",
        ]
    else:
        args += [
            f"--node_rank={node_rank}",
            f"--master_addr={master_addr}",
            f"--master_port={master_port}",
        ]
    return [*args, entrypoint]


def single_node_args(spec: Spec) -> list[str]:
    """All processes on this machine."""
    if not FRAMEWORKS[spec.framework].torchrun:
        return ["python", ENTRYPOINT]  # DataParallel: one process drives every GPU
    return torchrun_args(ENTRYPOINT, spec.processes_per_node)


def multi_node_args(spec: Spec, node_rank: int | str = NODE_RANK_VAR) -> list[str]:
    """The command node ``node_rank`` runs (the same on every node for c10d)."""
    return torchrun_args(
        ENTRYPOINT,
        spec.processes_per_node,
        spec.nodes,
        master_addr=spec.master_addr,
        master_port=spec.master_port,
        rdzv=spec.rdzv or "static",
        rdzv_id=spec.name,
        node_rank=node_rank,
    )


def shell_join(argv: Sequence[str]) -> str:
    """Quote for bash, leaving the node-rank placeholder expandable."""
    quoted = shlex.join(argv)
    return quoted.replace(shlex.quote(f"--node_rank={NODE_RANK_VAR}"), '--node_rank="$NODE_RANK"')


def commands(spec: Spec) -> list[Command]:
    """One command per node, in node-rank order."""
    if not spec.multi_node:
        return [
            Command("this machine", "bash launch/single_node.sh", tuple(single_node_args(spec)))
        ]
    result = []
    for rank in range(spec.nodes):
        where = f"node {rank}" + (f" ({spec.master_addr})" if rank == 0 else "")
        argv = tuple(multi_node_args(spec, rank))
        result.append(Command(where, f"bash launch/multi_node.sh {rank}", argv))
    return result
