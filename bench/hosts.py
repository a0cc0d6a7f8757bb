"""Seconds to a verdict on two separate hosts (network namespaces), for each misconfiguration
of the cluster matrix: genie's preflight (``launch/multi_node.sh N --preflight``) beside torch
alone (the plain ``torchrun`` line a user would write, torch's own timeouts), side by side.

    sudo python bench/hosts.py [--cap 120]

Torch alone is stopped at ``--cap`` seconds (printed as ">CAP hang"). Needs root and iproute2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genie.smoke import hosts  # noqa: E402

MASTER, PORT = f"{hosts.SUBNET}.1", "29500"
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1",
       "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
H = hosts.HostConfig
# case: (rendezvous, node 0's host, node 1's host, node 1's environment, started, edit node 1)
CASES = {
    "a hostnames do not resolve": ("c10d", H("node0"), H("node1"), {}, (0, 1), None),
    "b hostname -> 127.0.1.1": ("static", H("node0", own_name="127.0.1.1"),
                                H("node1", own_name="127.0.1.1"), {}, (0, 1), None),
    "c decoy interface first": ("static", H("node0", decoy=True, own_name="decoy"),
                                H("node1", decoy=True, own_name="decoy"), {}, (0, 1), None),
    "d other interface names": ("c10d", H("node0"), H("node1", interface="ens5"), {}, (0, 1),
                                None),
    "e firewall drops the port": ("c10d", H("node0", drop_tcp_port=int(PORT)), H("node1"), {},
                                  (0, 1), None),
    "f wrong MASTER_ADDR on node 1": ("c10d", H("node0"), H("node1"),
                                      {"MASTER_ADDR": f"{hosts.SUBNET}.9"}, (0, 1), None),
    "g node 0 never started": ("c10d", H("node0"), H("node1"), {}, (1,), None),
    "h another numpy on node 1": ("c10d", H("node0"), H("node1"), {"PYTHONPATH": "SHADOW"},
                                  (0, 1), None),
    "i a different train.py": ("c10d", H("node0"), H("node1"), {}, (0, 1), "train"),
    "j NNODES differs": ("c10d", H("node0"), H("node1"), {"NNODES": "3"}, (0, 1), None),
    "k node 1 started 20 s early": ("c10d", H("node0"), H("node1"), {}, (1, 0), None),
}  # fmt: skip
EARLY = 20.0  # seconds node 1 starts before node 0, for case k


def torchrun(rank: int, rdzv: str, env: dict) -> list[str]:
    master, nnodes = env.get("MASTER_ADDR", MASTER), env.get("NNODES", "2")
    args = ["torchrun", f"--nnodes={nnodes}", "--nproc_per_node=1"]
    if rdzv == "c10d":
        args += ["--rdzv_backend=c10d", f"--rdzv_endpoint={master}:{PORT}", "--rdzv_id=b"]
    else:
        args += [f"--node_rank={rank}", f"--master_addr={master}", f"--master_port={PORT}"]
    return [*args, "train.py", "--smoke"]


def seconds_to_verdict(case, projects: dict[str, Path], work: Path, cap: float, genie: bool):
    """(seconds until every started node ended, passed) on fresh hosts."""
    rdzv, node0, node1, env1, started, edit = case
    dirs = []
    for k in range(2):
        dest = work / f"n{k}"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(projects[rdzv], dest)
        dirs.append(dest)
    if edit:
        (dirs[1] / "train.py").write_text((dirs[1] / "train.py").read_text() + "\n# edited\n")
    shadow = work / "shadow" / "numpy-1.26.4.dist-info"  # numpy's metadata says 1.26.4 there
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n")
    with hosts.network([node0, node1]) as net:
        begin, procs = time.monotonic(), []
        for i, k in enumerate(started):
            if i and started[0] == 1:  # node 1 first: node 0 follows after EARLY seconds
                time.sleep(EARLY)
            extra = {n: str(shadow.parent) if v == "SHADOW" else v for n, v in env1.items()}
            env = {**ENV, "MASTER_ADDR": MASTER, "MASTER_PORT": PORT, **(extra if k else {})}
            argv = ["bash", "launch/multi_node.sh", str(k), "--preflight"] if genie else (
                torchrun(k, rdzv, env))  # fmt: skip
            procs.append(
                subprocess.Popen(
                    net.hosts[k].command(argv),
                    cwd=dirs[k],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        while time.monotonic() - begin < cap and any(p.poll() is None for p in procs):
            time.sleep(0.2)
        seconds = time.monotonic() - begin
        hung = any(p.poll() is None for p in procs)
        return seconds, hung, all(p.returncode == 0 for p in procs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=float, default=120.0)
    cap = parser.parse_args().cap
    if hosts.unavailable():
        sys.exit(f"bench/hosts.py: {hosts.unavailable()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        projects = {}
        for rdzv in ("c10d", "static"):
            subprocess.run([sys.executable, "-m", "genie", "new", str(work / rdzv), "--yes",
                            "--no-smoke", "--nodes", "2", "--gpus-per-node", "0",
                            "--nproc-per-node", "1", "--master-addr", MASTER, "--rdzv", rdzv,
                            "--scheduler", "none"], check=True, capture_output=True)  # fmt: skip
            projects[rdzv] = work / rdzv
        print(f"{'case':34} {'genie preflight':>22}   {'torch alone':>22}")
        for name, case in CASES.items():
            row = []
            for genie in (True, False):
                seconds, hung, passed = seconds_to_verdict(case, projects, work, cap, genie)
                verdict = "hang" if hung else "pass" if passed else "fail"
                row.append(f"{'>' if hung else ''}{seconds:6.1f} s {verdict}")
            print(f"{name:34} {row[0]:>22}   {row[1]:>22}")


if __name__ == "__main__":
    main()
