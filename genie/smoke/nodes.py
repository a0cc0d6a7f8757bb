"""The multi-node smoke test: simulated nodes on this host, each started through the
project's own ``launch/multi_node.sh NODE_RANK --smoke`` in its own copy of the project
(so nothing relies on a shared disk by accident).

:func:`plan` (pure) decides the nodes and their commands; :func:`run` copies the project,
starts one agent per node, and names the node of whatever failed.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from genie import contract, scratch
from genie.detect import Machine
from genie.generate import manifests
from genie.i18n import _
from genie.smoke import hosts as host_network
from genie.smoke import node_report, preflight, process
from genie.smoke.hosts import Host, HostConfig
from genie.smoke.plan import (
    NodeRun,
    RunOptions,
    SmokePlan,
    SmokeResult,
    cpu_precision,
    run_env,
    train_args,
)
from genie.smoke.verdict import judge, parse_reports
from genie.spec import Spec

LOOPBACK = "127.0.0.1"
MAX_SIMULATED_NODES = 4  # more agents than this only repeat what 4 show, on CPU
SCRIPT = "launch/multi_node.sh"
HOSTS_PORT = 29500
PODS = "pods"  # Kubernetes nodes: simulated on loopback
JOIN_GRACE = 30.0  # seconds the other nodes get to stop after one node fails
# Left out of each node's copy: outputs of earlier runs and environments.
NOT_COPIED = ("checkpoints", "runs", "logs", "mlruns", "wandb", "lightning_logs", ".git",
              ".venv", "venv", "__pycache__", "*.pyc")  # fmt: skip


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


def plan(
    spec: Spec,
    machine: Machine,
    workdir: Path,
    port: int,
    addr: str = LOOPBACK,
    hosts: Sequence[Host] = (),
) -> SmokePlan:
    """One agent per simulated node, each in ``workdir/node-K`` running the project's
    multi-node script with the rendezvous at ``addr:port``; on ``hosts`` (node K on the
    K-th, node 0's address the master's) when given. Kubernetes projects run their pods'
    command with the settings the operator gives the pods, their checkpoints on one folder
    (the run's volume)."""
    nodes, per_node, on_gpus = shape(spec, machine)
    addr = hosts[0].address if hosts else addr
    notes: list[str] = []
    if on_gpus:
        precision, backend, device = spec.precision, "nccl", "cuda"
    else:
        precision, notes = cpu_precision(spec)
        backend, device = "gloo", "cpu"
    notes += _where(spec, nodes, per_node, bool(hosts))
    runs = []
    for rank in range(nodes):
        cwd = workdir / f"node-{rank}"
        # a node keeps its checkpoints on its own disk, as without a shared filesystem;
        # sharded ones need one every node shares (each rank reads the others' shards)
        out = (workdir if spec.sharded or on_k8s(spec) else cwd) / "smoke-run"
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
        argv: tuple[str, ...] = ("bash", SCRIPT, str(rank), *train_args(precision, out))
        if on_k8s(spec):
            env.update(manifests.operator_env(spec, rank, nodes, per_node, addr, port))
            argv = (*manifests.COMMAND, *train_args(precision, out))
        runs.append(NodeRun(rank, argv, cwd, env, hosts[rank] if hosts else None))
    return SmokePlan(
        runs[0].argv,
        runs[0].env,
        nodes * per_node,
        backend,
        device,
        precision,
        tuple(notes),
        strategy=spec.strategy,
        nodes=tuple(runs),
    )


def on_k8s(spec: Spec) -> bool:
    """The nodes are the pods of the Kubernetes manifests (no launch/multi_node.sh)."""
    return spec.scheduler == "kubernetes"


def _where(spec: Spec, nodes: int, per_node: int, on_hosts: bool) -> list[str]:
    """How the simulated nodes differ from the planned ones, in words."""
    script = (
        _("the pods' command ({c}) with the operator's settings").format(
            c=" ".join(manifests.COMMAND)
        )
        if on_k8s(spec)
        else SCRIPT
    )
    notes = [
        _(
            "planned {nodes} node(s) x {per} processes; tested {n} simulated nodes x {p} on "
            "this host, through {script}"
        ).format(nodes=spec.nodes, per=spec.nproc_per_node, n=nodes, p=per_node, script=script)
    ]
    if on_hosts:
        notes.append(
            _(
                "each node on a host of its own: a network namespace with its own hostname, "
                "addresses and /etc/hosts (the others' names do not resolve there; node 1's "
                "hostname maps to 127.0.1.1, behind a docker0-like bridge, its link is ens5)"
            )
        )
    else:
        notes.append(_("the nodes share this host's loopback network and hostname"))
    return notes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def copy_project(project: Path, dest: Path) -> None:
    shutil.copytree(project, dest, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)


def run(
    spec: Spec,
    project: Path,
    options: RunOptions,
    *,
    addr: str | None = None,
    hosts: Sequence[HostConfig] | None = None,
) -> SmokeResult:
    """Simulate the nodes: each on a separate host (a network namespace, ``hosts`` or a
    well-configured default) where this machine can make them (root, iproute2), else on
    loopback, or at ``addr`` when given. Never raises for a failing project."""
    why_not = host_network.unavailable() if addr is None else "addr"
    if on_k8s(spec) and addr is None:
        # pods reach each other by name (the operator's services), unlike the separate
        # hosts made here, whose names do not resolve on the others
        why_not = PODS
    if why_not is not None:
        return _run(spec, project, options, addr or LOOPBACK, (), why_not)
    configs = hosts or default_hosts(shape(spec, options.machine)[0])
    with host_network.network(configs) as made:
        return _run(spec, project, options, made.hosts[0].address, made.hosts, None)


def default_hosts(count: int) -> list[HostConfig]:
    """Hosts the way clusters have them: no node resolves another's name, and every other
    node maps its own hostname to 127.0.1.1 (Debian's default), lists a docker0-like bridge
    first and calls its link ens5."""
    return [
        (
            HostConfig(f"node{k}", interface="ens5", own_name="127.0.1.1", decoy=True)
            if k % 2
            else HostConfig(f"node{k}")
        )
        for k in range(count)
    ]


def _run(
    spec: Spec,
    project: Path,
    options: RunOptions,
    addr: str,
    hosts: Sequence[Host],
    why_not: str | None,
) -> SmokeResult:
    with scratch.directory("nodes") as workdir:
        # separate hosts have their ports to themselves: torchrun's usual one
        port = HOSTS_PORT if hosts else free_port()
        p = plan(spec, options.machine, Path(workdir), port, addr, hosts)
        if why_not not in (None, "addr", PODS):
            note = _("separate hosts need {why}").format(why=why_not)
            p = replace(p, notes=(*p.notes, note))
        for node in p.nodes:
            copy_project(project, node.cwd)
        if not on_k8s(spec):  # the pods have no preflight: the operator starts them
            met = preflight.read(["".join(o.lines) for o in _execute(p, options, "--preflight")])
            if not met.passed:
                return _failed_preflight(p, met)
            p = replace(p, notes=(*p.notes, *filter(None, [preflight.note(met)])))
            # the nodes have just met: the job's own meet before torchrun would repeat it
            p = replace(p, nodes=tuple(replace(n, env={**n.env, "JOIN_WAIT": "0"})
                                       for n in p.nodes))  # fmt: skip
        outcomes = _execute(p, options)
    lines = [f"[node {i}] {line}" for i, o in enumerate(outcomes) for line in o.lines]
    reports = parse_reports(lines)
    failed = [o.returncode for o in outcomes if o.returncode != 0]
    problems = node_report.node_problems(p, outcomes, options.timeout)
    problems += [x for x in judge(p, failed[0] if failed else 0, reports) if x not in problems]
    return SmokeResult(
        p,
        failed[0] if failed else 0,
        max(o.seconds for o in outcomes),
        any(o.timed_out for o in outcomes),
        reports[-1] if reports else None,
        problems,
        "".join(lines),
    )


def _execute(p: SmokePlan, options: RunOptions, *args: str) -> list[process.JobOutcome]:
    """Every node's launch script at once (the smoke run, or with ``args`` instead)."""
    # The script runs `torchrun`: the one next to the interpreter that has the packages.
    path = f"{Path(options.python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    jobs = [
        process.Job(node.command(*args), node.cwd, {**os.environ, **node.env, "PATH": path},
                    f"[node {node.rank}] ")
        for node in p.nodes
    ]  # fmt: skip
    return process.execute_all(jobs, options.timeout, options.echo, grace=JOIN_GRACE)


def _failed_preflight(p: SmokePlan, met: preflight.Preflight) -> SmokeResult:
    problems = met.fails or [_("the preflight printed no verdict: see the output above")]
    return SmokeResult(p, 1, 0.0, False, None, [_("preflight: ") + x for x in problems])
