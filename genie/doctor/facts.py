"""Facts several checks share, each gathered once per run with a timeout: what torch says
(in a subprocess, so genie never imports torch itself), what nvidia-smi says, and what
CUDA_VISIBLE_DEVICES means."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from genie.doctor.base import Context, command, why
from genie.i18n import _, ngettext

TORCH_TIMEOUT = 30.0
_PROBE = r"""
import json, sys
out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"
else:
    out.update(version=torch.__version__, cuda=torch.version.cuda,
               hip=getattr(torch.version, "hip", None))
    try:
        out["cuda_available"] = torch.cuda.is_available()
        out["devices"] = torch.cuda.device_count()
        out["names"] = [torch.cuda.get_device_name(i) for i in range(out["devices"])]
    except Exception as err:
        out.update(cuda_available=False, devices=0, names=[], cuda_error=str(err))
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    except Exception:
        out["nccl"] = None
    import torch.distributed as dist
    out["distributed"] = dist.is_available()
    out["gloo"] = dist.is_available() and dist.is_gloo_available()
    out["nccl_backend"] = dist.is_available() and dist.is_nccl_available()
print(json.dumps(out))
"""


def torch_info(ctx: Context) -> dict[str, Any]:
    """What the project's interpreter's torch says about itself; ``{"error": ...}`` when it
    cannot be imported or does not answer in time."""
    return ctx.once("torch", lambda: _probe_torch(ctx))


def _probe_torch(ctx: Context) -> dict[str, Any]:
    try:
        out = command([ctx.python, "-c", _PROBE], ctx.env, timeout=TORCH_TIMEOUT)
        return dict(json.loads(out.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as err:
        return {"error": _("python -c 'import torch' failed: {why}").format(why=why(err))}


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory: str
    driver: str
    uuid: str


@dataclass(frozen=True)
class Smi:
    found: bool  # nvidia-smi is on PATH
    gpus: tuple[Gpu, ...] = ()
    error: str | None = None  # it is there but failed


def nvidia_smi(ctx: Context) -> Smi:
    return ctx.once("smi", lambda: _query_smi(ctx))


def smi_path(ctx: Context) -> str | None:
    return shutil.which("nvidia-smi", path=ctx.env.get("PATH"))


def _query_smi(ctx: Context) -> Smi:
    exe = smi_path(ctx)
    if exe is None:
        return Smi(found=False)
    query = "--query-gpu=index,name,memory.total,driver_version,uuid"
    try:
        out = command([exe, query, "--format=csv,noheader"], ctx.env)
    except (OSError, subprocess.SubprocessError) as err:
        return Smi(found=True, error=why(err))
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5 and parts[0].isdigit():
            gpus.append(Gpu(int(parts[0]), parts[1], parts[2], parts[3], parts[4]))
    return Smi(found=True, gpus=tuple(gpus))


@dataclass
class Visible:
    """CUDA_VISIBLE_DEVICES as CUDA reads it."""

    value: str | None  # None: unset, every GPU is visible
    devices: list[str] = field(default_factory=list)  # the entries CUDA will use
    problems: list[str] = field(default_factory=list)

    @property
    def hides_all(self) -> bool:
        return self.value is not None and not self.devices


_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


def parse_visible(value: str | None, gpus: tuple[Gpu, ...] | None = None) -> Visible:
    """Parse CUDA_VISIBLE_DEVICES; ``gpus`` (from nvidia-smi) bounds the indexes when known.
    CUDA stops at the first invalid entry, so what follows it is ignored."""
    seen = Visible(value)
    if value is None:
        return seen
    for raw in value.split(","):
        entry = raw.strip()
        if entry.lstrip("-").isdigit():
            if int(entry) < 0:
                break  # "-1" hides this and every later entry, by design
            if gpus is not None and int(entry) >= len(gpus):
                seen.problems.append(
                    ngettext(
                        "index {i} but only {n} GPU exists (0-{last})",
                        "index {i} but only {n} GPUs exist (0-{last})",
                        len(gpus),
                    ).format(i=entry, n=len(gpus), last=len(gpus) - 1)
                )
                break
        elif not _UUID.match(entry):
            if entry or value.strip():
                seen.problems.append(
                    _("{e!r} is not a GPU index or UUID; CUDA ignores it and what follows").format(
                        e=entry
                    )
                )
            break
        if entry in seen.devices:
            seen.problems.append(_("GPU {e} is listed twice").format(e=entry))
            break
        seen.devices.append(entry)
    return seen


def visible(ctx: Context) -> Visible:
    smi = nvidia_smi(ctx)
    return parse_visible(ctx.env.get("CUDA_VISIBLE_DEVICES"), smi.gpus if smi.gpus else None)
