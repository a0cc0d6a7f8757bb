"""Bytes between nodes per training step, FSDP beside HSDP, in one run: two separate hosts
(network namespaces joined by a bridge) x 2 CPU processes, the custom task's MLP widened by
flags, each project started on each host through its own ``launch/multi_node.sh``.

The bytes are what each host's network interface sent (``tx_bytes``). Two runs per strategy
(STEPS_SHORT and STEPS_LONG optimizer steps) cancel what does not depend on the step count:
the rendezvous, the checks before training, building the model, validation, checkpoints.

    sudo python bench/hsdp_traffic.py

Needs root and iproute2; takes a few minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genie.smoke import hosts  # noqa: E402

MASTER, PORT = f"{hosts.SUBNET}.1", "29500"
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1",
       "MASTER_ADDR": MASTER, "MASTER_PORT": PORT,
       "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
WIDE = ["--hidden", "1024", "--depth", "4"]  # 3.2M parameters: 12.7 MB in fp32
STEPS_SHORT, STEPS_LONG = 2, 7  # within the first epoch (8 steps under --smoke)
ARGS = ["--smoke", *WIDE, "--lr", "1e-3", "--epochs", "1", "--log-every", "1",
        "--save-every", "1000000", "--tracker", "none", "--num-workers", "0"]  # fmt: skip


def generate(root: Path, strategy: str) -> Path:
    argv = [sys.executable, "-m", "genie", "new", strategy, "--yes", "--no-smoke",
            "--strategy", strategy, "--nodes", "2", "--master-addr", MASTER,
            "--master-port", PORT, "--tracker", "none"]  # fmt: skip
    subprocess.run(argv, cwd=root, check=True, capture_output=True)
    return root / strategy


def sent(host: hosts.Host) -> int:
    path = f"/sys/class/net/{host.config.interface}/statistics/tx_bytes"
    done = subprocess.run(host.command(["cat", path]), capture_output=True, text=True, check=True)
    return int(done.stdout)


def bytes_between_nodes(project: Path, steps: int, work: Path) -> int:
    """What both hosts sent while the project trained ``steps`` steps on them."""
    checkpoints = work / f"ck-{project.name}-{steps}"  # one folder both hosts see
    args = [*ARGS, "--max-steps", str(steps), "--checkpoint-dir", str(checkpoints)]
    with hosts.network([hosts.HostConfig("node0"), hosts.HostConfig("node1")]) as net:
        before = [sent(h) for h in net.hosts]
        procs = [
            subprocess.Popen(
                h.command(["bash", "launch/multi_node.sh", str(h.index), *args]),
                cwd=project, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            for h in net.hosts
        ]
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(outputs[0][-3000:] + outputs[1][-3000:])
        trained = re.findall(r"step (\d+)/", outputs[0])
        assert trained and int(trained[-1]) == steps, outputs[0][-2000:]
        return sum(sent(h) for h in net.hosts) - sum(before)


def main() -> None:
    why = hosts.unavailable()
    if why:
        sys.exit(f"separate hosts: {why}")
    with tempfile.TemporaryDirectory(prefix="genie-bench-") as tmp:
        root = Path(tmp)
        rows = []
        for strategy in ("fsdp", "hsdp"):
            project = generate(root, strategy)
            short = bytes_between_nodes(project, STEPS_SHORT, root)
            long = bytes_between_nodes(project, STEPS_LONG, root)
            rows.append((strategy, (long - short) / (STEPS_LONG - STEPS_SHORT)))
        print("Bytes sent between 2 hosts per optimizer step, 2 x 2 CPU processes, 3.2M parameters")
        print(f"(12.7 MB of fp32 weights; steps {STEPS_SHORT} and {STEPS_LONG} subtracted)")
        fsdp = rows[0][1]
        for strategy, per_step in rows:
            print(f"  {strategy:5} {per_step / 1e6:8.1f} MB per step  {per_step / fsdp:5.2f}x")


if __name__ == "__main__":
    main()
