"""Running a generated project's launch scripts on separate hosts (network namespaces made by
genie.smoke.hosts): each host has its own copy of the project, started like a real node."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from genie.smoke import hosts

from .conftest import CPU_ENV, THIS_PYTHON

HOST_ENV = {**CPU_ENV, **THIS_PYTHON}
MASTER = f"{hosts.SUBNET}.1"
PORT = "29500"


def need_hosts() -> None:
    """Skip where separate hosts cannot be made; under CI=true, fail instead."""
    why = hosts.unavailable()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"separate hosts are required in CI: {why}")
    pytest.skip(f"separate hosts: {why}")


@dataclass
class NodeRun:
    returncode: int | None
    output: str
    seconds: float  # from the start of the first node


@dataclass
class Node:
    """How one node is started: its host, its copy, what differs about it."""

    config: hosts.HostConfig
    env: dict[str, str] = field(default_factory=dict)
    start_after: float = 0.0  # seconds after the first node
    started: bool = True  # False: never started (a node that never came up)


def copies(project: Path, root: Path, count: int) -> list[Path]:
    """One copy of the project per node (per-node disks)."""
    made = []
    for k in range(count):
        dest = root / f"node-{k}"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(project, dest, ignore=shutil.ignore_patterns("checkpoints", "runs"))
        made.append(dest)
    return made


def run_nodes(
    dirs: Sequence[Path],
    nodes: Sequence[Node],
    args: Sequence[str],
    timeout: float = 120,
    until: str | None = None,
) -> list[NodeRun]:
    """``bash launch/multi_node.sh K ARGS`` on host K, in ``dirs[K]``, all at once (each as
    its Node says); every process left is killed at ``timeout``, or once every node printed
    ``until``."""
    with hosts.network([n.config for n in nodes]) as net:
        return _run(net, dirs, nodes, args, timeout, until)


def _run(net, dirs, nodes, args, timeout, until) -> list[NodeRun]:
    started = time.monotonic()
    procs: list[subprocess.Popen | None] = [None] * len(nodes)
    logs = [Path(d).with_suffix(".log") for d in dirs]
    ended: list[float] = [0.0] * len(nodes)
    for k in sorted(range(len(nodes)), key=lambda i: nodes[i].start_after):
        node = nodes[k]
        if not node.started:
            continue
        time.sleep(max(0.0, node.start_after - (time.monotonic() - started)))
        env = {**os.environ, **HOST_ENV, "MASTER_ADDR": MASTER, "MASTER_PORT": PORT, **node.env}
        argv = net.hosts[k].command(["bash", "launch/multi_node.sh", str(k), *args])
        with open(logs[k], "w") as log:
            procs[k] = subprocess.Popen(
                argv, cwd=dirs[k], env=env, stdout=log, stderr=subprocess.STDOUT
            )
    while time.monotonic() - started < timeout:
        for k, proc in enumerate(procs):
            if proc is not None and not ended[k] and proc.poll() is not None:
                ended[k] = time.monotonic() - started
        if all(ended[k] or procs[k] is None for k in range(len(nodes))):
            break
        if until and all(until in logs[k].read_text(errors="replace") for k in range(len(nodes))):
            break
        time.sleep(0.2)
    results = []
    for k, proc in enumerate(procs):
        if proc is None:
            results.append(NodeRun(None, "", 0.0))
            continue
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        text = logs[k].read_text(errors="replace")
        results.append(NodeRun(proc.returncode, text, ended[k] or timeout))
    return results


def report_line(output: str, marker: str) -> str | None:
    return next((line for line in output.splitlines() if marker in line), None)


def cut(host: hosts.Host) -> None:
    """From now on, every packet between ``host`` and the others is dropped (nftables):
    its link gone mid-run, no connection reset, nothing said."""
    chains = "".join(
        f"  chain {hook} {{\n    type filter hook {hook} priority 0; policy accept;\n"
        f'    {"iifname" if hook == "input" else "oifname"} != "lo" drop\n  }}\n'
        for hook in ("input", "output")
    )
    hosts._nft(host.netns, f"table inet genie_cut {{\n{chains}}}\n")
