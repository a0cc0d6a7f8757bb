"""What this machine has, found without importing torch (``genie --help`` must stay fast)."""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata

from genie.i18n import _

RESOLVE_TIMEOUT = 5.0  # seconds a name lookup may take before it counts as unanswered


@dataclass(frozen=True)
class Machine:
    gpus: int  # visible NVIDIA GPUs (0 when none or no driver)
    torch: str | None  # installed torch version, e.g. "2.14.1"
    python: str  # running interpreter, "3.11"
    hostname: str
    slurm: bool = False  # sbatch on PATH, or running inside a SLURM allocation
    # what the hostname resolves to here; None where it does not resolve (or was not looked up)
    hostname_addresses: tuple[str, ...] | None = None
    gpu_memory: int | None = None  # bytes, the smallest of the GPUs here (gpu_memory())

    @property
    def hostname_loopback(self) -> bool:
        """The hostname resolves here, to loopback only (Debian's 127.0.1.1 for its own name)."""
        return bool(self.hostname_addresses) and all(
            ipaddress.ip_address(a.split("%")[0]).is_loopback for a in self.hostname_addresses or ()
        )


def gpu_count() -> int:
    """GPUs that ``nvidia-smi -L`` lists, within CUDA_VISIBLE_DEVICES; 0 when none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def gpu_memory() -> int | None:
    """The smallest total memory of this machine's GPUs, bytes, from nvidia-smi; None when
    there are none."""
    exe = shutil.which("nvidia-smi")
    if exe is None or gpu_count() == 0:
        return None
    query = [exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True)
        sizes = [int(line) for line in out.stdout.split() if line.isdigit()]
    except (OSError, subprocess.SubprocessError):
        return None
    return min(sizes) * 1024**2 if sizes else None


def installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def resolve(host: str, timeout: float = RESOLVE_TIMEOUT) -> list[str] | str:
    """The IPv4/IPv6 addresses of ``host``, or why it does not resolve. A daemon thread keeps
    a stuck resolver from hanging doctor."""
    found: list[str | BaseException] = []

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            found.extend(dict.fromkeys(str(i[4][0]) for i in infos))
        except OSError as err:
            found.append(err)

    worker = threading.Thread(target=look_up, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return _("no answer from the resolver within {t:.0f} s").format(t=timeout)
    if found and isinstance(found[0], BaseException):
        return str(found[0])
    return [str(a) for a in found]


@functools.lru_cache(maxsize=1)
def machine() -> Machine:
    hostname = socket.gethostname()
    addresses = resolve(hostname)
    gpus = gpu_count()
    return Machine(
        gpus=gpus,
        torch=installed_torch(),
        python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        hostname=hostname,
        slurm=slurm_available(),
        hostname_addresses=tuple(addresses) if isinstance(addresses, list) else None,
        gpu_memory=gpu_memory() if gpus else None,
    )


def non_loopback_ip() -> str | None:
    """This host's address on its default route (no packet is sent), or None without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            address = str(s.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def slurm_available(env: Mapping[str, str] | None = None) -> bool:
    """Whether jobs can be submitted from here: ``sbatch`` on PATH, or inside an allocation."""
    env = os.environ if env is None else env
    return shutil.which("sbatch") is not None or "SLURM_JOB_ID" in env
