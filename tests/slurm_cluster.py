"""A private one-node SLURM for tests: its own munged, slurmctld and slurmd, configured in a
temp dir (``SLURM_CONF``), on free ports; stopped by the PIDs it started."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .conftest import free_port

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel")
SBIN = ("/usr/sbin", "/sbin")


def missing() -> list[str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return [tool for tool in DAEMONS if shutil.which(tool, path=path) is None]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 - 512  # leave slurmd some headroom
    return 1024


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]  # for sbatch, squeue, scancel: SLURM_CONF and the munge socket
    daemons: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        """Stop exactly the daemons this cluster started, newest first (waited for, so none
        is left a zombie that still looks alive)."""
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons.clear()

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )


def _sbin(tool: str) -> str:
    found = shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    assert found, tool
    return found


def start(root: Path, timeout: float = 60, bind_cores: bool = False) -> Cluster:
    """Configure and start a one-node SLURM under ``root``; raises if it does not come up.
    ``bind_cores``: each step's tasks are bound to the cores they were given (task/affinity,
    as clusters that constrain CPUs do), not left free on every CPU of the node."""
    task_plugin = "task/affinity\nTaskPluginParam=Cores" if bind_cores else "task/none"
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    node = socket.gethostname().split(".")[0]
    sock = root / "munge.socket"
    for sub in ("state", "spool"):
        (root / sub).mkdir(exist_ok=True)
    key = root / "munge.key"
    subprocess.run([_sbin("mungekey"), "-c", "-f", "-k", str(key)], check=True)
    key.chmod(0o600)
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=genie
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin={task_plugin}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={_memory_mb()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Cluster(root, env)
    log = open(root / "daemons.log", "ab")  # noqa: SIM115 - outlives this function
    try:
        commands = [
            [_sbin("munged"), "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--log-file={root}/munged.log", f"--pid-file={root}/munged.pid",
             f"--seed-file={root}/munged.seed"],
            [_sbin("slurmctld"), "-D", "-i"],
            [_sbin("slurmd"), "-D"],
        ]  # fmt: skip
        for argv in commands:
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
            cluster.daemons.append(proc)
            if argv[0].endswith("munged"):
                _wait(lambda: sock.exists(), 10, "munged", cluster)
        _wait(lambda: _idle(env), timeout, "the node to become idle", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _idle(env: dict[str, str]) -> bool:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True, timeout=10
    )
    return out.returncode == 0 and out.stdout.strip() == "idle"


def _wait(ready, timeout: float, what: str, cluster: Cluster) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"slurm: timed out waiting for {what}\n{cluster.log()}")


if __name__ == "__main__":  # a manual check: python tests/slurm_cluster.py DIR
    import sys

    c = start(Path(sys.argv[1]))
    print("up", c.env["SLURM_CONF"], [d.pid for d in c.daemons])
    try:
        print(subprocess.run(["sinfo"], env=c.env, capture_output=True, text=True).stdout)
    finally:
        c.stop()
