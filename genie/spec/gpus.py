"""A GPU's memory as answered (--gpu-memory): a size such as 80GiB, or a GPU's name."""

from __future__ import annotations

import re

from genie.i18n import _

GIB = 1024**3
# Total memory of common GPUs, MiB as nvidia-smi reports it.
GPUS = {
    "H200": 143771, "B200": 183359, "H100": 81559, "H800": 81559, "A100-80GB": 81920,
    "A100": 40960, "A100-40GB": 40960, "L40S": 46068, "L40": 46068, "A6000": 49140,
    "V100": 32768, "A10G": 23028, "A10": 23028, "L4": 23034, "RTX4090": 24564,
    "T4": 15360, "MI300X": 196592,
}  # fmt: skip
UNITS = {"GIB": GIB, "GB": 10**9, "MIB": 1024**2, "MB": 10**6, "TIB": 1024**4, "TB": 10**12}


def memory_bytes(text: str) -> int | None:
    """``"80GiB"``, ``"80GB"``, ``"81559MiB"`` or a GPU name from GPUS -> bytes; None for
    anything else."""
    name = text.strip().upper().replace(" ", "").replace("NVIDIA", "")
    if name in GPUS:
        return GPUS[name] * 1024**2
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(GIB|GB|MIB|MB|TIB|TB)", name)
    if match is None or float(match.group(1)) <= 0:
        return None
    return int(float(match.group(1)) * UNITS[match.group(2)])


def check_gpu_memory(text: str) -> str | None:
    if memory_bytes(text) is not None:
        return None
    return _("a size such as 80GiB or 40GB, or a GPU: {g}").format(g=", ".join(sorted(GPUS)))


def as_answer(size: int) -> str:
    """A detected size (bytes) as the answer that gives it back: "81559MiB"."""
    return f"{size // 1024**2}MiB"
