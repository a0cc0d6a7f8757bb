"""The multi-node smoke test: simulated nodes on this host, each started through the
project's own ``launch/multi_node.sh NODE_RANK --smoke`` in its own copy of the project
(so nothing relies on a shared disk by accident).

:func:`plan` (pure) decides the nodes and their commands; :func:`run` copies the project,
starts one agent per node, and names the node of whatever failed.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from genie import contract, scratch, smoke_process
from genie.detect import Machine
from genie.i18n import _
from genie.smoke import (
    NodeRun,
    SmokePlan,
    SmokeResult,
    cpu_precision,
    judge,
    parse_reports,
    run_env,
    train_args,
)
from genie.spec import Spec

LOOPBACK = "127.0.0.1"
MAX_SIMULATED_NODES = 4  # more agents than this only repeat what 4 show, on CPU
SCRIPT = "launch/multi_node.sh"
JOIN_GRACE = 30.0  # seconds the other nodes get to stop after one node fails
# Left out of each node's copy: outputs of earlier runs and environments.
NOT_COPIED = ("checkpoints", "runs", "logs", "mlruns", "wandb", "lightning_logs", ".git",
              ".venv", "venv", "__pycache__", "*.pyc")  # fmt: skip
# torchrun's failure summary, one block per failed rank: "time : 2026-12-01_11:07:09" then
# "rank : 3 (local_rank: 1)"; and each rank's traceback lines, "[rank3]: RuntimeError: ..."
_TIME = re.compile(r"^\s*time\s*:\s*(\S+)")
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")
_ERROR = re.compile(r"^\[rank(\d+)\]: ((?:\w+\.)*\w*(?:Error|Exception|Exit)\b.*)$")


def shape(spec: Spec, machine: Machine) -> tuple[int, int, bool]:
    """Simulated nodes, processes per node, and whether on GPUs. CPU: 2 nodes x 2 processes,
    or up to 4 nodes x 1 when the project has more than 2 nodes; GPUs: the visible ones split
    across the nodes."""
    wanted = min(spec.nodes, MAX_SIMULATED_NODES) if spec.nodes > 2 else 2
    if machine.gpus >= wanted:
        return wanted, machine.gpus // wanted, True
    if spec.nodes > 2:
        return wanted, 1, False
    return 2, contract.CPU_PROCESSES, False


def plan(spec: Spec, machine: Machine, workdir: Path, port: int, addr: str = LOOPBACK) -> SmokePlan:
    """One agent per simulated node, each in ``workdir/node-K`` running the project's
    multi-node script with the rendezvous at ``addr:port``."""
    nodes, per_node, on_gpus = shape(spec, machine)
    notes: list[str] = []
    if on_gpus:
        precision, backend, device = spec.precision, "nccl", "cuda"
    else:
        precision, notes = cpu_precision(spec)
        backend, device = "gloo", "cpu"
    notes.append(
        _("planned {nodes} node(s) x {per} processes; tested {n} simulated nodes x {p} on "
          "this host, through {script}").format(
            nodes=spec.nodes, per=spec.nproc_per_node, n=nodes, p=per_node, script=SCRIPT)
    )  # fmt: skip
    runs = []
    for rank in range(nodes):
        cwd = workdir / f"node-{rank}"
        out = cwd / "smoke-run"
        env = {
            **run_env(out),
            "MASTER_ADDR": addr,
            "MASTER_PORT": str(port),
            "NNODES": str(nodes),
            "NPROC_PER_NODE": str(per_node),
        }
        if on_gpus:
            first = rank * per_node
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(per_node))
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
        argv = ("bash", SCRIPT, str(rank), *train_args(precision, out))
        runs.append(NodeRun(rank, argv, cwd, env))
    return SmokePlan(
        runs[0].argv, runs[0].env, nodes * per_node, backend, device, precision, tuple(notes),
        strategy=spec.strategy, nodes=tuple(runs),
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def copy_project(project: Path, dest: Path) -> None:
    shutil.copytree(project, dest, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)


class Failure(NamedTuple):
    time: str  # torchrun's, to the second
    rank: int
    node: int
    error: str  # the exception line of the rank's traceback, if it printed one
    root: bool  # torchrun's "Root Cause (first observed failure)" on its node


def failed_ranks(texts: list[str]) -> list[Failure]:
    """Every rank torchrun reported failed, given each node's output (pure)."""
    found: dict[int, Failure] = {}
    for node, text in enumerate(texts):
        when, root, ranks, errors = "", False, [], {}
        for line in text.splitlines():
            if "Root Cause" in line:
                root = True
            elif m := _TIME.match(line):
                when = m.group(1)
            elif m := _RANK.match(line):
                ranks.append((when, int(m.group(1)), root))
                root = False
            elif m := _ERROR.match(line):
                errors[int(m.group(1))] = m.group(2).strip()
        for when, rank, is_root in ranks:
            failure = Failure(when, rank, node, errors.get(rank, ""), is_root)
            if rank not in found or is_root:
                found[rank] = failure
    return sorted(found.values())


def node_problems(
    p: SmokePlan, outcomes: list[smoke_process.JobOutcome], timeout: float
) -> list[str]:
    """Which node did what wrong, in words (pure): the rank that failed first (each node's
    root cause, compared by torchrun's failure times), then the others, then each node."""
    problems = []
    if any(o.timed_out for o in outcomes):
        problems.append(
            _("timed out after {t:.0f} s; every process of every node was killed").format(t=timeout)
        )
    failures = failed_ranks(["".join(o.lines) for o in outcomes])
    roots = [f for f in failures if f.root] or failures
    if roots:
        first = [f for f in roots if f.time == min(r.time for r in roots)]
        for f in first:
            problems.append(
                _("rank {r} failed on node {n}").format(r=f.rank, n=f.node)
                + (f": {f.error}" if f.error else "")
            )
        later = [f for f in failures if f not in first]
        if later:
            problems.append(
                _("then rank(s) {r} failed (node(s) {n})").format(
                    r=", ".join(str(f.rank) for f in later),
                    n=", ".join(str(n) for n in sorted({f.node for f in later})),
                )
            )
    for node, outcome in zip(p.nodes, outcomes):
        if not outcome.started_children:
            problems.append(
                _("node {n} never joined: its torchrun started no worker (is {addr}:{port} "
                  "reachable from it?)").format(
                    n=node.rank, addr=node.env["MASTER_ADDR"], port=node.env["MASTER_PORT"])
            )  # fmt: skip
        elif outcome.stopped and not outcome.timed_out:
            problems.append(_("node {n} was stopped after another node failed").format(
                n=node.rank))  # fmt: skip
        elif outcome.returncode not in (0, None) and not outcome.stopped:
            problems.append(
                _("node {n}: torchrun exited with {rc}").format(n=node.rank, rc=outcome.returncode)
            )
    return problems


def run(
    spec: Spec,
    project: Path,
    machine: Machine,
    timeout: float,
    echo: Callable[[str], None] = lambda line: None,
    python: str = sys.executable,
    addr: str = LOOPBACK,
) -> SmokeResult:
    """Simulate the nodes on this host; never raises for a failing project."""
    # The script runs `torchrun`: the one next to the interpreter that has the packages.
    path = f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    with scratch.directory("nodes") as workdir:
        p = plan(spec, machine, Path(workdir), free_port(), addr)
        jobs = []
        for node in p.nodes:
            copy_project(project, node.cwd)
            env = {**os.environ, **node.env, "PATH": path}
            jobs.append(smoke_process.Job(node.argv, node.cwd, env, f"[node {node.rank}] "))
        outcomes = smoke_process.execute_all(jobs, timeout, echo, grace=JOIN_GRACE)
    lines = [f"[node {i}] {line}" for i, o in enumerate(outcomes) for line in o.lines]
    reports = parse_reports(lines)
    failed = [o.returncode for o in outcomes if o.returncode != 0]
    problems = node_problems(p, outcomes, timeout)
    problems += [x for x in judge(p, failed[0] if failed else 0, reports) if x not in problems]
    seconds = max(o.seconds for o in outcomes)
    return SmokeResult(
        p, failed[0] if failed else 0, seconds, any(o.timed_out for o in outcomes),
        reports[-1] if reports else None, problems, "".join(lines),
    )  # fmt: skip
