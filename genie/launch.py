"""Spec -> the exact commands that launch the generated project. Pure: nothing runs here."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from genie.registry import FRAMEWORKS
from genie.spec import Spec

ENTRYPOINT = "train.py"
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


def single_node_args(spec: Spec) -> list[str]:
    """All processes on this machine."""
    if not FRAMEWORKS[spec.framework].torchrun:
        return ["python", ENTRYPOINT]  # DataParallel: one process drives every GPU
    return [*standalone(spec.processes_per_node), ENTRYPOINT]


# What the multi-node script reads from its argument or the environment (torchrun's own names
# for the address and port), falling back to the answers; see :func:`script_vars`.
NODE_RANK_VAR = "$NODE_RANK"
SCRIPT_VARS = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE")


def script_vars(spec: Spec) -> dict[str, str]:
    """The multi-node script's variables and their defaults (the answers)."""
    return {
        "MASTER_ADDR": str(spec.master_addr),
        "MASTER_PORT": str(spec.master_port),
        "NNODES": str(spec.nodes),
        "NPROC_PER_NODE": str(spec.nproc_per_node),
    }


def multi_node_args(spec: Spec, node_rank: int | None = None) -> list[str]:
    """What node ``node_rank`` runs; with None, the script's line, which reads shell variables
    (``$NODE_RANK``, ``$MASTER_ADDR``, ...) that the script sets."""
    if node_rank is None:
        v = {name: f"${name}" for name in SCRIPT_VARS}
        rank, is_host = NODE_RANK_VAR, "$IS_HOST"
    else:
        v, rank, is_host = script_vars(spec), str(node_rank), str(int(node_rank == 0))
    args = ["torchrun", f"--nnodes={v['NNODES']}", f"--nproc_per_node={v['NPROC_PER_NODE']}"]
    if spec.rdzv == "c10d":
        # c10d assigns node ranks and, with max_restarts, re-forms the group when a worker dies
        # (train.py resumes from the last checkpoint). Node 0 hosts the rendezvous store:
        # torch's guess (the endpoint matches this machine's hostname) fails where the
        # hostname maps to 127.0.1.1 or the address is on another interface, so is_host says it.
        args += [
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={v['MASTER_ADDR']}:{v['MASTER_PORT']}",
            f"--rdzv_id={spec.name}",
            f"--rdzv_conf=is_host={is_host}",
            f"--max_restarts={ELASTIC_MAX_RESTARTS}",
        ]
    else:
        args += [
            f"--node_rank={rank}",
            f"--master_addr={v['MASTER_ADDR']}",
            f"--master_port={v['MASTER_PORT']}",
        ]
    return [*args, ENTRYPOINT]


_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_.:/=$-]*$")


def shell_join(argv: Sequence[str]) -> str:
    """Quote for bash, leaving ``$VARIABLE`` references in values expandable."""
    parts = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if eq and "$" in value:
            if not _SHELL_SAFE.match(value):
                raise ValueError(f"cannot quote {arg!r} for the launch script")
            parts.append(f'{flag}="{value}"')
        else:
            parts.append(shlex.quote(arg))
    return " ".join(parts)


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
