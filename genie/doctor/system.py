"""Checks of the operating system around a run: shared memory, open files, InfiniBand, GPU
topology and the NCCL environment variables."""

from __future__ import annotations

import os
import re
import resource
import subprocess

from genie.doctor.base import Context, Result, command, why
from genie.doctor.facts import nvidia_smi, smi_path
from genie.i18n import _

GIB = 1024**3
SHM_MIN = 1 * GIB
NOFILE_MIN = 4096

# What each NCCL variable does, for the ones people set when something breaks.
NCCL_VARS: dict[str, str] = {
    "NCCL_DEBUG": _("log level (INFO shows transports and interfaces)"),
    "NCCL_DEBUG_SUBSYS": _("which subsystems NCCL_DEBUG logs"),
    "NCCL_P2P_DISABLE": _("1 turns off GPU peer-to-peer (NVLink/PCIe); slower, avoids P2P hangs"),
    "NCCL_P2P_LEVEL": _("how far apart GPUs may be and still use P2P"),
    "NCCL_SHM_DISABLE": _("1 turns off shared-memory transport between processes"),
    "NCCL_IB_DISABLE": _("1 turns off InfiniBand/RoCE; NCCL falls back to TCP sockets"),
    "NCCL_IB_HCA": _("which InfiniBand adapters NCCL uses"),
    "NCCL_NET_GDR_LEVEL": _("when GPUDirect RDMA is used"),
    "NCCL_SOCKET_IFNAME": _("which network interface NCCL's sockets use"),
    "NCCL_SOCKET_NTHREADS": _("socket threads per connection"),
    "NCCL_NSOCKS_PERTHREAD": _("sockets per thread"),
    "NCCL_ALGO": _("forces the collective algorithm (Ring, Tree, ...)"),
    "NCCL_PROTO": _("forces the protocol (Simple, LL, LL128)"),
    "NCCL_BLOCKING_WAIT": _("old name of TORCH_NCCL_BLOCKING_WAIT"),
    "NCCL_ASYNC_ERROR_HANDLING": _("old name of TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    "NCCL_TIMEOUT": _("not read by NCCL or torch: use init_process_group(timeout=...)"),
}
# Set to these values, the variable costs speed: worth a warning.
NCCL_SLOW = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def shm(ctx: Context) -> Result:
    try:
        st = os.statvfs(ctx.shm_path)
    except OSError as err:
        return Result(
            "shm",
            "warn",
            _("{p} is not there ({why}): DataLoader workers cannot share tensors").format(
                p=ctx.shm_path, why=err.strerror
            ),
            _("mount a tmpfs at /dev/shm, or use --num-workers 0"),
        )
    size = st.f_frsize * st.f_blocks
    detail = _("{p}: {g:.1f} GiB").format(p=ctx.shm_path, g=size / GIB)
    if size < SHM_MIN:
        return Result(
            "shm",
            "warn",
            detail + _(" (below 1 GiB: DataLoader workers and NCCL can crash with 'Bus error')"),
            _(
                "docker run --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with "
                "medium: Memory at /dev/shm"
            ),
        )
    return Result("shm", "pass", detail)


def open_files(ctx: Context) -> Result:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = _("unlimited") if soft == resource.RLIM_INFINITY else str(soft)
    detail = _("open-file limit {n}").format(n=limit)
    if soft != resource.RLIM_INFINITY and soft < NOFILE_MIN:
        target = NOFILE_MIN * 16 if hard == resource.RLIM_INFINITY else min(hard, NOFILE_MIN * 16)
        return Result(
            "open_files",
            "warn",
            detail + _(" (DataLoader workers and many ranks open many files)"),
            _("ulimit -n {t} before launching (raise the hard limit in limits.conf)").format(
                t=target
            ),
        )
    return Result("open_files", "pass", detail)


def nccl_env(ctx: Context) -> Result:
    names = sorted(k for k in ctx.env if k.startswith(("NCCL_", "TORCH_NCCL_")))
    if not names:
        return Result("nccl_env", "pass", _("no NCCL_* variables set (NCCL's defaults)"))
    unknown = _("not a variable genie knows")
    described = [f"{k}={ctx.env[k]}: {NCCL_VARS.get(k, unknown)}" for k in names]
    slow = [k for k in names if NCCL_SLOW.get(k) == ctx.env[k].strip()]
    if slow:
        return Result(
            "nccl_env",
            "warn",
            "; ".join(described),
            _("unset {v} once the problem it works around is fixed (it costs speed)").format(
                v=", ".join(slow)
            ),
        )
    return Result("nccl_env", "pass", "; ".join(described))


def infiniband(ctx: Context) -> Result:
    try:
        devices = sorted(p.name for p in ctx.infiniband_path.iterdir())
    except OSError:
        devices = []
    if not devices:
        return Result(
            "infiniband", "pass", _("no InfiniBand: NCCL talks across nodes over TCP sockets")
        )
    states = []
    for dev in devices:
        ports = sorted((ctx.infiniband_path / dev / "ports").glob("*/state"))
        state = ",".join(p.read_text().split(":")[-1].strip() for p in ports) or "?"
        states.append(f"{dev} ({state})")
    detail = _("InfiniBand: {d}").format(d="; ".join(states))
    if ctx.env.get("NCCL_IB_DISABLE", "").strip() == "1":
        return Result(
            "infiniband",
            "warn",
            detail + _("; but NCCL_IB_DISABLE=1"),
            _("unset NCCL_IB_DISABLE to use it"),
        )
    return Result("infiniband", "pass", detail)


_LINK = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+)$")
SLOW_LINKS = {"SYS": _("across CPU sockets"), "NODE": _("through a CPU's PCIe root")}


def topology(ctx: Context) -> Result:
    smi = nvidia_smi(ctx)
    exe = smi_path(ctx)
    if len(smi.gpus) < 2 or exe is None:
        return Result("topology", "pass", _("fewer than 2 GPUs: no GPU-to-GPU links to check"))
    try:
        out = command([exe, "topo", "-m"], ctx.env)
    except (OSError, subprocess.SubprocessError) as err:
        return Result(
            "topology", "warn", _("nvidia-smi topo -m failed: {why}").format(why=why(err))
        )
    links = summarize_topology(out)
    if not links:
        return Result("topology", "warn", _("nvidia-smi topo -m printed no GPU matrix"))
    detail = _("GPU pairs: {s}").format(
        s=", ".join(f"{n} x {kind}" for kind, n in sorted(links.items()))
    )
    slow = [f"{k} ({SLOW_LINKS[k]})" for k in links if k in SLOW_LINKS]
    if slow:
        return Result(
            "topology",
            "warn",
            detail + _("; slow links: {s}").format(s=", ".join(slow)),
            _(
                "keep the GPUs of one job on one socket (CUDA_VISIBLE_DEVICES); if NCCL hangs, "
                "try NCCL_P2P_DISABLE=1"
            ),
        )
    return Result("topology", "pass", detail)


def summarize_topology(matrix: str) -> dict[str, int]:
    """Count each link kind between distinct GPU pairs in ``nvidia-smi topo -m`` output."""
    counts: dict[str, int] = {}
    rows = [line.split() for line in matrix.splitlines() if re.match(r"^GPU\d+\s", line)]
    for i, row in enumerate(rows):
        cells = [c for c in row[1:] if _LINK.match(c)]
        for j, cell in enumerate(cells[: len(rows)]):
            if j > i:
                counts[cell] = counts.get(cell, 0) + 1
    return counts
