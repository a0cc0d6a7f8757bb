"""A real collective: two processes on this host all_reduce a tensor, on the backend the
project would use (gloo on CPU, NCCL on GPUs). Each process is killed at the timeout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

from genie.doctor.base import Context, Result
from genie.doctor.facts import torch_info
from genie.i18n import _
from genie.smoke.signatures import explain

WORLD = 2
_SCRIPT = r"""
import datetime, json, os, sys
import torch
import torch.distributed as dist

backend, timeout = sys.argv[1], float(sys.argv[2])
rank = int(os.environ["RANK"])
device = "cpu"
if backend == "nccl":
    device = f"cuda:{rank % max(torch.cuda.device_count(), 1)}"
    torch.cuda.set_device(device)
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
t = torch.full((4,), float(rank + 1), device=device)
dist.all_reduce(t)
print(json.dumps({"rank": rank, "sum": t.tolist()}), flush=True)
dist.barrier()
os._exit(0)  # skips the process-group teardown at exit, which can abort under gloo
"""


@dataclass
class Attempt:
    backend: str
    ok: bool
    detail: str  # what happened
    output: str  # both ranks' output, for explaining a failure


def backend_for(ctx: Context) -> str:
    if ctx.spec is not None:
        return "nccl" if ctx.spec.gpus_per_node else "gloo"
    devices = int(torch_info(ctx).get("devices", 0) or 0)
    return "nccl" if devices >= WORLD else "gloo"


def all_reduce(ctx: Context, backend: str, extra_env: dict[str, str] | None = None) -> Attempt:
    """Run the 2-process all_reduce; never takes longer than ``ctx.collective_timeout``."""
    with tempfile.NamedTemporaryFile(
        "w", prefix="genie_doctor_collective_", suffix=".py", delete=False
    ) as f:
        f.write(_SCRIPT)
    with socket.socket() as s:  # a free port for the rendezvous (a race here is harmless)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    group = max(ctx.collective_timeout - 2, 1)
    base = {
        **ctx.env,
        **(extra_env or {}),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(WORLD),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    procs = [
        subprocess.Popen(
            [ctx.python, f.name, backend, str(group)],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        for r in range(WORLD)
    ]
    try:
        outputs, timed_out = _wait(procs, ctx.collective_timeout)
    finally:
        for p in procs:
            _kill(p)
        os.unlink(f.name)
    return _judge(backend, procs, outputs, timed_out, ctx.collective_timeout)


def _wait(procs: list[subprocess.Popen], timeout: float) -> tuple[list[str], bool]:
    deadline = time.monotonic() + timeout
    outputs, timed_out = [], False
    for p in procs:
        try:
            out, _err = p.communicate(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(p)
            out, _err = p.communicate()
        outputs.append(out or "")
    return outputs, timed_out


def _kill(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def _judge(
    backend: str, procs: list[subprocess.Popen], outputs: list[str], timed_out: bool, t: float
) -> Attempt:
    output = "\n".join(outputs)
    reports = []
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            if line.startswith("{"):
                reports.append(json.loads(line))
    used = backend
    expected = [float(sum(range(1, WORLD + 1)))] * 4
    if len(reports) == WORLD and all(r["sum"] == expected for r in reports):
        return Attempt(backend, True, _("{b}: 2 processes agreed on all_reduce").format(b=used), "")
    if timed_out:
        why = _("no result within {t:.0f} s; both processes were killed").format(t=t)
    elif reports:
        why = _("wrong sum {s}").format(s=reports[0]["sum"])
    else:
        lines = [x.strip() for x in output.splitlines() if x.strip()]
        codes = ", ".join(str(p.returncode) for p in procs)
        why = _("exit {c}: {last}").format(c=codes, last=lines[-1][:200] if lines else "")
    return Attempt(backend, False, f"{used}: {why}", output)


def collective(ctx: Context) -> Result:
    backend = backend_for(ctx)
    first = all_reduce(ctx, backend)
    if first.ok:
        return Result("collective", "pass", first.detail)
    if backend == "nccl":
        retry = all_reduce(ctx, backend, {"NCCL_P2P_DISABLE": "1"})
        if retry.ok:
            return Result(
                "collective",
                "warn",
                first.detail + _("; works with NCCL_P2P_DISABLE=1"),
                _(
                    "export NCCL_P2P_DISABLE=1 (slower), or fix GPU peer-to-peer (IOMMU/ACS "
                    "settings in the BIOS, or the driver)"
                ),
            )
        first.detail += _("; with NCCL_P2P_DISABLE=1 too: {d}").format(d=retry.detail)
    # a signature's fix; not the fallback's (it points at a traceback doctor does not print)
    known = [e for e in explain(first.output, 1) if e.id != "rank_raised"]
    fix = known[0].fix if known else _("run it under torchrun with NCCL_DEBUG=INFO to see why")
    return Result("collective", "fail", first.detail, fix)
