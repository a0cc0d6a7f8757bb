"""Check in seconds that the nodes can train together, through the job's own launch:

    bash launch/multi_node.sh NODE_RANK --preflight     # on every node, as for training

First ``meet``, one process per node before torchrun starts: node 0 opens a store at
MASTER_ADDR:MASTER_PORT, every node writes what it is, and node 0 names the nodes that
never arrive (within PREFLIGHT_WAIT seconds) and every difference between them. Then
the job's own torchrun line runs ``check`` on every rank: the process group forms, an
all_reduce checks its sum and the bandwidth between the nodes is measured. Node 0
prints one table and a verdict; a node exits 0 only when nothing failed.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

MARKER = "GENIE_PREFLIGHT "  # the verdict line genie's smoke test reads
ROOT = Path(__file__).resolve().parents[1]
STARTED = time.monotonic()
# Seconds to wait for the other nodes: a node started some 15 s before node 0 still
# passes (node 0 needs seconds to listen); one that never starts is named within 30 s.
WAIT = float(os.environ.get("PREFLIGHT_WAIT", "27"))
NODE, NODES = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
MASTER, PORT = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
CHECKPOINTS = ROOT / os.environ.get("PREFLIGHT_CHECKPOINT_DIR", "checkpoints")
IFNAME = "GLOO_SOCKET_IFNAME"  # launch/network.sh exports the interface it chose
INSTALL = "pip install -r requirements-torch.txt -r requirements.txt"
# What must be the same on every node, with the fix when it is not
SAME = {
    "nnodes": "set the same NNODES on every node",
    "nproc": "set the same NPROC_PER_NODE on every node",
    "python": "use the same Python on every node",
    "torch": f"install the same torch on every node ({INSTALL})",
    "cuda": "install the same torch build (CUDA version) on every node",
    "nccl": "install the same torch build (NCCL version) on every node",
}


def packages() -> dict[str, str | None]:
    """The installed version of every package the requirements files name, and numpy."""
    names = {"numpy"}
    files = ("requirements-torch.txt", "requirements.txt")
    for line in "\n".join((ROOT / f).read_text() for f in files).splitlines():
        name = line.split("#")[0].strip().split(";")[0]
        for mark in "<>=!~[ ":
            name = name.split(mark)[0]
        if name:
            names.add(name)
    found = {}
    for name in sorted(names):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def code() -> dict[str, str]:
    """A hash of each file of the project's code (tests aside)."""
    files = [
        *ROOT.glob("*.py"),
        *ROOT.glob("launch/*"),
        *ROOT.glob("requirements*.txt"),
    ]
    return {
        str(f.relative_to(ROOT)): hashlib.sha256(f.read_bytes()).hexdigest()[:12]
        for f in sorted(files)
        if f.is_file()
    }


def free_gb(path: Path) -> float | None:
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return round(shutil.disk_usage(path).free / 1e9, 1)
    except OSError:
        return None


def gpus() -> tuple[list[str], str]:
    """This node's GPU models, and the driver version ("-" without one)."""
    import torch

    models = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(
            query, capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        driver = ""
    return models, driver.split("\n")[0].strip() or "-"


def facts(token: str | None) -> dict:
    import torch

    models, driver = gpus()
    cuda = torch.cuda.is_available()
    return {
        "node": NODE,
        "hostname": socket.gethostname(),
        "address": f"{os.environ.get('LOCAL_ADDR', '?')} {os.environ.get(IFNAME, '')}",
        "nnodes": NODES,
        "nproc": int(os.environ["NPROC_PER_NODE"]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "-",
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-",
        "gpus": models,
        "driver": driver,
        "packages": packages(),
        "code": code(),
        "checkpoint_free_gb": free_gb(CHECKPOINTS),
        "shm_free_gb": free_gb(Path("/dev/shm")),
        # whether this node sees the file node 0 wrote into its checkpoint directory
        "shared_checkpoints": token is not None and (CHECKPOINTS / token).exists(),
    }


def differences(nodes: list[dict]) -> tuple[list[str], list[str]]:
    """What fails (first) and what only warns, across the nodes that arrived."""
    fails, warns = [], []
    for key, fix in SAME.items():
        seen = {str(n[key]) for n in nodes}
        if len(seen) > 1:
            values = ", ".join(f"node {n['node']} {n[key]}" for n in nodes)
            fails.append(f"{key} differs ({values}): {fix}")
    kinds = {
        "packages": f"{INSTALL} on every node",
        "code": "copy the same project to every node",
    }
    for kind, fix in kinds.items():
        for name in sorted({k for n in nodes for k in n[kind]}):
            seen = {n[kind].get(name) for n in nodes}
            if len(seen) > 1:
                values = ", ".join(
                    f"node {n['node']} {n[kind].get(name) or 'missing'}" for n in nodes
                )
                fails.append(f"{name} differs ({values}): {fix}")
    for n in nodes:
        if n["gpus"] and n["nproc"] > len(n["gpus"]):
            fails.append(
                f"node {n['node']} has {len(n['gpus'])} GPUs for {n['nproc']} processes"
            )
        if (n["checkpoint_free_gb"] or 0) < 1:
            warns.append(
                f"node {n['node']}: under 1 GB free for checkpoints at {CHECKPOINTS}"
            )
        if n["gpus"] and (n["shm_free_gb"] or 0) < 1:
            warns.append(
                f"node {n['node']}: under 1 GB free in /dev/shm (NCCL, data workers)"
            )
    if len({str(n["gpus"]) for n in nodes}) > 1:
        warns.append("the nodes have different GPUs: the slowest sets the pace")
    unshared = [
        str(n["node"]) for n in nodes if not n["shared_checkpoints"] and n["node"]
    ]
    if unshared:
        warns.append(
            f"{CHECKPOINTS.name}/ is not shared with node(s) {', '.join(unshared)}: "
            "each node keeps its own; a resume takes the newest, wherever it is"
        )
    return fails, warns


def reach(timeout: float) -> str | None:
    """None once MASTER_ADDR:MASTER_PORT accepts a connection; else why it never did."""
    deadline, why = STARTED + timeout, "no answer"
    while time.monotonic() < deadline:
        try:
            left = max(0.1, min(5.0, deadline - time.monotonic()))
            socket.create_connection((MASTER, PORT), timeout=left).close()
            return None
        except socket.gaierror:
            return f"{MASTER} does not resolve here: use node 0's IP address"
        except OSError as err:
            if isinstance(err, ConnectionRefusedError):
                why = "nothing listens there: start node 0 (it hosts the rendezvous)"
            elif isinstance(err, socket.timeout):
                why = "no answer (packets dropped): open the port in node 0's firewall"
            else:  # no route to host, network unreachable
                return f"{err.strerror}: is MASTER_ADDR node 0's address as seen here?"
        time.sleep(0.5)
    return f"{why} (waited {timeout:.0f} s)"


def meet() -> int:
    """Node 0 hosts a store, every node writes its facts, node 0 judges and tells."""
    if NODE != 0:
        problem = reach(WAIT)
        if problem is not None:
            return verdict(
                [f"node {NODE} cannot reach node 0 at {MASTER}:{PORT}: {problem}"], []
            )
    from torch.distributed import TCPStore

    timeout = datetime.timedelta(seconds=WAIT + 15)
    token = None
    if NODE == 0:
        token = f".preflight-{secrets.token_hex(4)}"
        CHECKPOINTS.mkdir(parents=True, exist_ok=True)
        (CHECKPOINTS / token).touch()
        store = TCPStore(
            MASTER, PORT, is_master=True, wait_for_workers=False, timeout=timeout
        )
        store.set("token", token)
    else:
        store = TCPStore(MASTER, PORT, is_master=False, timeout=timeout)
        token = store.get("token").decode()
    if store.add(f"claims/{NODE}", 1) > 1:
        return verdict(
            [f"two nodes were started with NODE_RANK {NODE}: give each its own"], []
        )
    store.set(f"facts/{NODE}", json.dumps(facts(token)))
    if NODE == 0:
        return judge(store, token)
    found = json.loads(store.get("verdict"))
    # torchrun needs the port next: wait for node 0's store to go (its sockets close)
    with socket.create_connection((MASTER, PORT), timeout=WAIT) as watch:
        store.set(f"left/{NODE}", "1")
        while watch.recv(1):
            pass
    return verdict(found["fails"], found["warns"], quiet=True)


def judge(store, token: str) -> int:
    """Node 0: wait for every node (WAIT seconds at most), compare, tell the verdict."""
    keys = [f"facts/{n}" for n in range(NODES)]
    deadline = STARTED + WAIT
    while time.monotonic() < deadline and not store.check(keys):
        time.sleep(0.2)
    arrived = [json.loads(store.get(k)) for k in keys if store.check([k])]
    missing = [n for n in range(NODES) if not store.check([f"facts/{n}"])]
    fails, warns = differences(arrived)
    fails = [
        f"node {n} never arrived at {MASTER}:{PORT} within {WAIT:.0f} s: start it, and "
        "check its MASTER_ADDR, MASTER_PORT and the firewall"
        for n in missing
    ] + fails
    store.set("verdict", json.dumps({"fails": fails, "warns": warns}))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not store.check(
        [f"left/{n}" for n in range(1, NODES) if n not in missing]
    ):
        time.sleep(0.1)
    (CHECKPOINTS / token).unlink(missing_ok=True)
    if fails:
        print(table(arrived, []), file=sys.stderr)
        return verdict(fails, warns)
    # for the torchrun stage that follows (it removes the file)
    Path(os.environ["PREFLIGHT_FACTS"]).write_text(
        json.dumps({"nodes": arrived, "warns": warns})
    )
    return 0


def table(nodes: list[dict], extra: list[tuple[str, str]]) -> str:
    """One row per fact, one column per node, then ``extra`` rows."""
    keys = [
        "hostname",
        "address",
        *SAME,
        "driver",
        "gpus",
        "checkpoint_free_gb",
        "shm_free_gb",
    ]
    rows = [("", *(f"node {n['node']}" for n in nodes))]
    for key in keys:
        rows.append(
            (
                key,
                *(
                    str(n[key]) if not isinstance(n[key], list) else str(len(n[key]))
                    for n in nodes
                ),
            )
        )
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(r[i].ljust(width[i]) for i in range(len(r))) for r in rows]
    return "\n".join(lines + [f"{k.ljust(width[0])}  {v}" for k, v in extra])


def verdict(fails: list[str], warns: list[str], quiet: bool = False, **facts) -> int:
    """Print the problems, one line each, then the verdict line; the exit status."""
    if not quiet:
        for line in fails:
            print(f"preflight FAIL: {line}", file=sys.stderr)
        for line in warns:
            print(f"preflight warn: {line}", file=sys.stderr)
    print(
        MARKER + json.dumps({"ok": not fails, "fails": fails, "warns": warns, **facts}),
        flush=True,
    )
    return 1 if fails else 0


def check() -> int:
    """Every rank, under the job's torchrun: process group, all_reduce, bandwidth."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=WAIT))
    world = dist.get_world_size()
    total = torch.full((1,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(total)
    summed = total.item() == world * (world + 1) / 2
    data = torch.ones(4 * 2**20, device=device)  # 16 MB
    dist.all_reduce(data)  # once to warm up
    started = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(data)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    # bus bandwidth of a ring all_reduce: each rank sends 2 (n - 1) / n of the data
    gbps = 5 * data.numel() * 4 * 2 * (world - 1) / world / seconds / 1e9
    dist.destroy_process_group()
    if NODE != 0 or local_rank != 0:
        return 0 if summed else 1
    met = json.loads(Path(os.environ["PREFLIGHT_FACTS"]).read_text())
    Path(os.environ["PREFLIGHT_FACTS"]).unlink(missing_ok=True)
    fails = [] if summed else [f"all_reduce over {world} ranks gave a wrong sum"]
    extra = [
        ("all_reduce", f"{'ok' if summed else 'WRONG'} ({world} ranks, {backend})"),
        ("bandwidth", f"{gbps:.2f} GB/s bus bandwidth (all_reduce of 16 MB)"),
    ]
    print(table(met["nodes"], extra), file=sys.stderr)
    return verdict(
        fails, met["warns"], world=world, backend=backend, gbps=round(gbps, 3)
    )


if __name__ == "__main__":
    sys.exit(meet() if sys.argv[1:] == ["meet"] else check())
