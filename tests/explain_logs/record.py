"""Record the logs of tests/test_explain_corpus.py: a generated 2-node project run on two
separate hosts (network namespaces, as the hosts tests make them), each case as a user met
it. Run as root from the repository's root; it rewrites tests/explain_logs/*.log.

    python -m tests.explain_logs.record [CASE...]

The addresses, hostnames and timings in the logs are this machine's; nothing else is edited.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from genie.smoke import hosts
from tests.conftest import run_genie
from tests.e2e.hosts import HOST_ENV, MASTER, PORT, copies

HERE = Path(__file__).resolve().parent
ARGS = ["--smoke", "--epochs", "3", "--eval-every", "3"]


def project(root: Path) -> Path:
    flags = ["--framework", "ddp", "--nodes", "2", "--gpus-per-node", "0", "--nproc-per-node",
             "1", "--master-addr", MASTER, "--master-port", PORT, "--scheduler", "none"]  # fmt: skip
    made = run_genie("new", "two", "--yes", "--no-smoke", *flags, cwd=root)
    assert made.returncode == 0, made.stderr
    return root / "two"


def start(net, k: int, argv: list[str], cwd: Path, log: Path, env: dict) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(net.hosts[k].command(argv), cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, **HOST_ENV, **env})  # fmt: skip


def wait_for(log: Path, text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while text not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.2)


def record(case: str, dirs: list[Path], tmp: Path) -> None:
    logs = [tmp / f"{case}-node{k}.log" for k in range(2)]
    env = {"MASTER_ADDR": MASTER, "MASTER_PORT": PORT}
    with hosts.network([hosts.HostConfig("node0"), hosts.HostConfig("node1")]) as net:
        if case == "success":  # both nodes through launch/multi_node.sh, exit 0
            procs = [start(net, k, ["bash", "launch/multi_node.sh", str(k), *ARGS], dirs[k],
                           logs[k], env) for k in range(2)]  # fmt: skip
            codes = [p.wait(timeout=300) for p in procs]
            assert codes == [0, 0], codes
        elif case in ("peer-killed", "peer-never-back"):
            # node 1's whole host SIGKILLed mid-run (its rank hung at step 10); node 0's log
            # as it stands 20 s after the loss (its torchrun then waits for node 1 to
            # rejoin), or (never back) once it gave up waiting, RDZV_TIMEOUT later
            if case == "peer-never-back":
                env["RDZV_TIMEOUT"] = "20"
            launch = [["bash", "launch/multi_node.sh", str(k), *ARGS] for k in range(2)]
            node0 = start(net, 0, launch[0], dirs[0], logs[0], env)
            start(net, 1, launch[1], dirs[1], logs[1], {**env, "GENIE_FAULT": "hang:*:10"})
            wait_for(logs[1], "GENIE_FAULT hang", 120)
            net.hosts[1].kill_all()
            if case == "peer-killed":
                time.sleep(20)
                net.hosts[0].kill_all()
            node0.wait(timeout=180)
            logs[1].unlink()  # a host killed whole: its log says nothing of the loss
    for log in logs:
        if log.exists():
            (HERE / log.name).write_text(log.read_text(errors="replace"))
            print("wrote", HERE / log.name, file=sys.stderr)


CASES = ("success", "peer-killed", "peer-never-back")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        two = project(root)
        for case in sys.argv[1:] or CASES:
            record(case, copies(two, root / case, 2), root)


if __name__ == "__main__":
    main()
