"""What every smoke runner shares: the plan, the result, and the options a runner takes.
A leaf: it imports nothing else of the smoke package."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genie import contract
from genie.i18n import _

if TYPE_CHECKING:
    from genie.detect import Machine
    from genie.smoke.hosts import Host
    from genie.spec import Spec

# Added to a run's environment: Python writes every thread's stack on SIGABRT (and on crashes).
FAULTHANDLER_ENV = {"PYTHONFAULTHANDLER": "1"}


def _silent(line: str) -> None:
    pass


@dataclass(frozen=True)
class RunOptions:
    """How a runner runs: on which machine, for how long, where its output goes, which
    interpreter (the one with the project's packages)."""

    machine: Machine
    timeout: float = contract.SMOKE_TIMEOUT
    echo: Callable[[str], None] = _silent
    python: str = sys.executable


@dataclass(frozen=True)
class NodeRun:
    """One simulated node of a multi-node smoke test: its launch script call, in its own
    copy of the project."""

    rank: int
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]  # added to the inherited environment
    host: Host | None = None  # a separate host (network namespace) to run on; None: here

    def command(self, *args: str) -> list[str]:
        """The launch script with ``args`` instead of the smoke run's, on this node's host."""
        argv = [*self.argv[:3], *args] if args else list(self.argv)
        return self.host.command(argv) if self.host else argv


@dataclass(frozen=True)
class SmokePlan:
    argv: tuple[str, ...]
    env: dict[str, str]  # added to the inherited environment
    nproc: int
    backend: str
    device: str
    precision: str
    notes: tuple[str, ...]  # how the test differs from the planned deployment
    devices: int | None = None  # DataParallel: the devices one process must drive
    strategy: str | None = None  # ddp or fsdp; None for DataParallel
    nodes: tuple[NodeRun, ...] = ()  # simulated nodes; nproc is then the world size of all


@dataclass
class SmokeResult:
    plan: SmokePlan
    returncode: int | None
    seconds: float
    timed_out: bool = False
    report: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    output: str = ""  # everything the run printed, for explaining a failure

    @property
    def passed(self) -> bool:
        return not self.problems


def train_args(precision: str, checkpoint_dir: Path) -> tuple[str, ...]:
    """What ``train.py`` gets in a smoke run."""
    return (
        "--smoke",
        "--precision",
        precision,
        "--checkpoint-dir",
        str(checkpoint_dir),
        "--log-dir",
        str(checkpoint_dir / "runs"),
    )


def run_env(checkpoint_dir: Path) -> dict[str, str]:
    """Added to a smoke run's environment: unbuffered, one thread, stacks at a timeout, and
    trackers offline and out of the project directory."""
    return {
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        **FAULTHANDLER_ENV,  # at a timeout, each rank shows where it hung
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(checkpoint_dir),
        "MLFLOW_TRACKING_URI": (checkpoint_dir / "mlruns").as_uri(),
    }


def cpu_precision(spec: Spec) -> tuple[str, list[str]]:
    """The precision a CPU run tests, and a note when it differs from the spec's."""
    if spec.precision == "fp16":
        return "bf16", [_("fp16 needs CUDA: tested bf16 on CPU")]
    return spec.precision, []
