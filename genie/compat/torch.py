"""What genie knows about PyTorch releases, as data: the Pythons each supports, the first
release of each API the generated code uses, and why a combination cannot be generated.

Facts and their sources: ``shared/reference/pytorch-compat.md``. Rows marked there as
unverified (torch 2.15) are flagged ``verified=False`` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.i18n import Translations, _, translations
from genie.registry import FRAMEWORKS

Version = tuple[int, int]


def parse_minor(text: str) -> Version:
    """``"2.14"`` or ``"2.14.1"`` -> ``(2, 14)``. Raises ValueError on anything else."""
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(text)
    return int(parts[0]), int(parts[1])


def format_minor(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


@dataclass(frozen=True)
class TorchRelease:
    version: Version
    python_min: Version
    python_max: Version  # newest Python with published wheels
    torchvision: str
    compile_python_max: Version | None  # None: no torch.compile in this release
    verified: bool = True

    @property
    def minor(self) -> str:
        return format_minor(self.version)


# Newest first: the wizard offers them in this order.
RELEASES: tuple[TorchRelease, ...] = (
    TorchRelease((2, 15), (3, 10), (3, 14), "0.29", (3, 14), verified=False),
    TorchRelease((2, 14), (3, 10), (3, 15), "0.29", (3, 14)),
    TorchRelease((2, 13), (3, 10), (3, 15), "0.28", (3, 14)),
    TorchRelease((2, 12), (3, 10), (3, 14), "0.27", (3, 14)),
    TorchRelease((2, 11), (3, 10), (3, 14), "0.26", (3, 14)),
    TorchRelease((2, 10), (3, 10), (3, 14), "0.25", (3, 14)),
    TorchRelease((2, 9), (3, 10), (3, 14), "0.24", (3, 13)),
    TorchRelease((2, 8), (3, 9), (3, 13), "0.23", (3, 13)),
    TorchRelease((2, 7), (3, 9), (3, 13), "0.22", (3, 13)),
    TorchRelease((2, 6), (3, 9), (3, 13), "0.21", (3, 13)),
    TorchRelease((2, 5), (3, 9), (3, 13), "0.20", (3, 12)),
    TorchRelease((2, 4), (3, 8), (3, 12), "0.19", (3, 12)),
    TorchRelease((2, 3), (3, 8), (3, 12), "0.18", (3, 11)),
    TorchRelease((2, 2), (3, 8), (3, 12), "0.17", (3, 11)),
    TorchRelease((2, 1), (3, 8), (3, 11), "0.16", (3, 11)),
    TorchRelease((2, 0), (3, 8), (3, 11), "0.15", (3, 10)),
    # Wheels exist up to 3.11, but torchrun crashes at start on 3.11 (measured): 3.10 is the max.
    TorchRelease((1, 13), (3, 7), (3, 10), "0.14", None),
)

SUPPORTED: tuple[str, ...] = tuple(r.minor for r in RELEASES)
# The default: the newest release genie has verified (newer ones are offered, marked).
NEWEST: str = next(r.minor for r in RELEASES if r.verified)
UNVERIFIED: tuple[str, ...] = tuple(r.minor for r in RELEASES if not r.verified)

# First torch minor that has each API the generated code may use.
FEATURES: dict[str, Version] = {
    "compile": (2, 0),  # torch.compile
    "fused_adamw": (2, 0),  # torch.optim.AdamW(fused=True), CUDA
    "amp_grad_scaler": (2, 3),  # torch.amp.GradScaler("cuda"); torch.cuda.amp.GradScaler before
    "init_device_id": (2, 3),  # init_process_group(device_id=...)
    "load_weights_only": (1, 13),  # torch.load(weights_only=...)
    # 1.13's weights-only unpickler rejects Python floats (pytorch/pytorch#94670), so it
    # cannot read an optimizer state dict; measured: "Unsupported operand 71" on 1.13.1.
    "weights_only_floats": (2, 0),
    "cpu_fp16_autocast": (2, 2),
    "numpy2": (2, 3),  # wheels built against numpy 2; older ones need numpy<2
    # FSDP: FSDP1 (FullyShardedDataParallel) exists from 1.11, but full state dicts that load
    # back through torch.distributed.checkpoint.state_dict.{get,set}_state_dict need 2.2.
    "fsdp": (2, 2),
    "tensorboard_without_six": (2, 0),
    "fully_shard": (2, 6),  # FSDP2, public as torch.distributed.fsdp.fully_shard
    # torch.distributed.checkpoint.async_save: the shards are written while training goes on
    "dcp_async": (2, 3),
    "module_compile": (2, 2),  # nn.Module.compile(): compiles in place, keys unchanged
    # torchrun --local_addr: the address a node advertises in the rendezvous, instead of its
    # hostname (which the other nodes may not resolve)
    "local_addr": (2, 0),
    # torch.load(mmap=True): a checkpoint's tensors stay on disk until read
    "load_mmap": (2, 1),
    # TORCH_NCCL_ASYNC_ERROR_HANDLING on by default: a rank stuck in a collective past the
    # timeout ends its process; before, only torchrun set NCCL_ASYNC_ERROR_HANDLING=1
    "nccl_async_errors_default": (2, 2),
    # torchrun --signals_to_handle: torchrun can leave Ctrl-C (SIGINT) to the launch script
    # (2.9.1 has no such flag; measured in the wheels)
    "torchrun_signals_to_handle": (2, 10),
    # torchrun reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT (and --shutdown-timeout): how long its
    # workers get after a SIGTERM before its SIGKILL; a fixed 30 s before (2.11.0's wheel has
    # neither, 2.12.1's both: measured in the wheels)
    "torchrun_shutdown_timeout": (2, 12),
    # The Flight Recorder's settings under their backend-neutral names, TORCH_FR_BUFFER_SIZE
    # and TORCH_FR_DUMP_TEMP_FILE (the TORCH_NCCL_ names before; 2.14 still reads those,
    # with a deprecation warning on every rank: measured). Renamed in 2.9 (not measured
    # here: from a public project that sets both for that reason).
    "fr_names": (2, 9),
    # torch.distributed._tools' mem_tracker and fsdp2_mem_tracker, which genie plan traces a
    # step with (2.4.1's wheel has neither, 2.5.1's both: measured in the wheels)
    "memory_trackers": (2, 5),
}


def release(minor: str) -> TorchRelease:
    version = parse_minor(minor)
    for r in RELEASES:
        if r.version == version:
            return r
    raise KeyError(minor)


# Releases where something that works before and after is broken, by what breaks.
REGRESSIONS: dict[str, tuple[Version, ...]] = {
    # torchrun 2.4 hands the workers the hostname as MASTER_ADDR even with --local_addr
    # (pytorch/pytorch#125743; fixed by #135262 in 2.5)
    "local_addr_ignored": ((2, 4),),
}


def features(minor: str) -> dict[str, bool]:
    """Feature gates for a torch minor, as booleans for the templates; a regression is True
    in the releases it breaks."""
    version = parse_minor(minor)
    gates = {name: version >= first for name, first in FEATURES.items()}
    return {**gates, **{name: version in broken for name, broken in REGRESSIONS.items()}}


def python_problem(minor: str, python: str) -> str | None:
    """Why torch ``minor`` cannot run on Python ``python``, or None when it can."""
    r = release(minor)
    py = parse_minor(python)
    if r.python_min <= py <= r.python_max:
        return None
    ok = [x.minor for x in RELEASES if x.python_min <= py <= x.python_max]
    hint = (
        _("torch {low}-{high} run on Python {python}").format(low=ok[-1], high=ok[0], python=python)
        if ok
        else _("no supported torch does")
    )
    return _("torch {v} supports Python {low}-{high}, not {python} ({hint})").format(
        v=r.minor,
        low=format_minor(r.python_min),
        high=format_minor(r.python_max),
        python=python,
        hint=hint,
    )


# Plain PyTorch FSDP on CPU with gloo, measured with the nox sessions: 2.14 trains, gathers
# and reloads full state dicts; 2.4 (FSDP1) calls torch.cuda at wrap time, and with
# device_id=cpu crashes (SIGSEGV) gathering the state dict; 2.6 (FSDP2) fails in
# backward ("'Stream' object has no attribute 'record_event'"). Versions in between are
# unmeasured, so they count as GPU-only.
FSDP_CPU_FROM: Version = (2, 14)


def fsdp_needs_gpus(framework: str, torch: str, tr: Translations | None = None) -> str | None:
    """Why FSDP in ``framework`` on torch ``torch`` cannot run without GPUs, or None; in
    genie's language, or ``tr``'s (a project's README)."""
    gettext = translations().gettext if tr is None else tr.gettext
    needs = FRAMEWORKS[framework].fsdp_needs_gpus
    if needs:
        return gettext(needs)
    if parse_minor(torch) < FSDP_CPU_FROM:
        return gettext("FSDP on CPU works from torch {v} (torch {torch} needs GPUs for it)").format(
            v=format_minor(FSDP_CPU_FROM), torch=torch
        )
    return None


def fsdp_problem(minor: str, precision: str) -> str | None:
    """Why the fsdp strategy cannot be generated for torch ``minor``, or None."""
    if parse_minor(minor) < FEATURES["fsdp"]:
        return _(
            "FSDP checkpoints that load back need torch.distributed.checkpoint.state_dict "
            "(torch 2.2 or newer), not torch {v}; use --torch 2.2 or newer, or --strategy ddp"
        ).format(v=minor)
    if precision == "fp16":
        return _(
            "FSDP is generated for bf16 or fp32 (fp16 would need a sharded gradient scaler); "
            "use --precision bf16"
        )
    return None


def compile_problem(minor: str, python: str) -> str | None:
    """Why torch.compile cannot be used for torch ``minor`` on Python ``python``, or None."""
    r = release(minor)
    if r.compile_python_max is None:
        return _("torch.compile needs torch 2.0 or newer, not {v}").format(v=r.minor)
    if parse_minor(python) > r.compile_python_max:
        return _("torch {v} supports torch.compile up to Python {high}, not {python}").format(
            v=r.minor, high=format_minor(r.compile_python_max), python=python
        )
    return None
