"""Run a generated project's ``--smoke`` mode under torchrun and judge what it reports.

:func:`plan` (pure) decides what can be tested on this machine; :func:`run` launches it in its
own process group, streams its output, enforces the timeout on the whole tree; :func:`judge`
(pure) reads only the exit code and the one ``GENIE_SMOKE`` line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from genie import compat, contract, launch, scratch, smoke_process
from genie.detect import Machine
from genie.errors import GenieError, SmokeFailed
from genie.i18n import _
from genie.registry import FRAMEWORKS
from genie.smoke_verdict import judge, parse_reports  # noqa: F401  (re-exported)
from genie.spec import Spec

CPU_PROCESSES = contract.CPU_PROCESSES
DEFAULT_TIMEOUT = contract.SMOKE_TIMEOUT


@dataclass(frozen=True)
class NodeRun:
    """One simulated node of a multi-node smoke test: its launch script call, in its own
    copy of the project."""

    rank: int
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]  # added to the inherited environment


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


def unavailable(spec: Spec, machine: Machine) -> str | None:
    """Why this machine cannot smoke-test the project at all, or None."""
    why = compat.fsdp_needs_gpus(spec.framework, spec.torch) if spec.strategy == "fsdp" else None
    if why and not machine.gpus:
        return _("{why}, and this machine has none: run `genie smoke` on a GPU node").format(
            why=why
        )
    return None


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
        **smoke_process.FAULTHANDLER_ENV,  # at a timeout, each rank shows where it hung
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(checkpoint_dir),
        "MLFLOW_TRACKING_URI": (checkpoint_dir / "mlruns").as_uri(),
    }


def cpu_precision(spec: Spec) -> tuple[str, list[str]]:
    """The precision a CPU run tests, and a note when it differs from the spec's."""
    if spec.precision == "fp16":
        return "bf16", [_("fp16 needs CUDA: tested bf16 on CPU")]
    return spec.precision, []


def untested_notes(spec: Spec, machine: Machine, python: str) -> list[str]:
    """What a run on this machine does not test of the project as planned."""
    notes = []
    if spec.gpus_per_node and not machine.gpus:
        notes.append(
            _(
                "ran on CPU with gloo: NCCL, {precision} on GPUs and {n} process(es) per node "
                "are untested; run `genie smoke` on a GPU node to test them"
            ).format(precision=spec.precision, n=spec.processes_per_node)
        )
    if python == sys.executable:
        notes.extend(_version_notes(spec, machine))
    return notes


def plan(
    spec: Spec, machine: Machine, checkpoint_dir: Path, python: str = sys.executable
) -> SmokePlan:
    """What to run: all visible GPUs with NCCL, else 2 CPU processes with gloo."""
    notes: list[str] = []
    if machine.gpus:
        nproc, backend, device, env = machine.gpus, "nccl", "cuda", {}
        precision = spec.precision
    else:
        nproc, backend, device = CPU_PROCESSES, "gloo", "cpu"
        env = {"CUDA_VISIBLE_DEVICES": ""}  # a CUDA build on a GPU-less machine: stay on CPU
        precision, notes = cpu_precision(spec)
    notes += untested_notes(spec, machine, python)
    train = ("train.py", *train_args(precision, checkpoint_dir))
    env.update(run_env(checkpoint_dir))
    if not FRAMEWORKS[spec.framework].torchrun:  # DataParallel: one process, every device
        devices = machine.gpus or 1
        return SmokePlan((python, *train), env, 1, "none", device, precision, tuple(notes), devices)
    if spec.world_size != nproc or spec.multi_node:
        notes.append(
            _("planned {nodes} node(s) x {per} processes; tested 1 node x {n}").format(
                nodes=spec.nodes, per=spec.nproc_per_node, n=nproc
            )
        )
    torchrun = launch.standalone(nproc, (python, "-m", "torch.distributed.run"))
    argv = (*torchrun, "--tee=3", *train)
    return SmokePlan(
        argv, env, nproc, backend, device, precision, tuple(notes), strategy=spec.strategy
    )


def _version_notes(spec: Spec, machine: Machine) -> list[str]:
    """How the interpreter running the test differs from the one the project targets."""
    found = []
    if machine.torch:
        here = machine.torch.split("+")[0]
        try:
            same = compat.parse_minor(here) == compat.parse_minor(spec.torch)
        except ValueError:
            same = True
        if not same:
            found.append(_("ran on torch {here}; the project targets torch {want}").format(
                here=here, want=spec.torch))  # fmt: skip
    if compat.parse_minor(machine.python) != compat.parse_minor(spec.python):
        found.append(_("ran on Python {here}; the project targets Python {want}").format(
            here=machine.python, want=spec.python))  # fmt: skip
    if found:
        found.append(
            _(
                "to test the real versions: pip install -r requirements.txt into an environment "
                "with Python {py}, then genie smoke --python PATH/TO/ITS/python"
            ).format(py=spec.python)
        )
    return found


# torchrun's --tee prefix, as it starts each piece of a rank's output it has read
def run(
    spec: Spec,
    project: Path,
    machine: Machine,
    timeout: float = DEFAULT_TIMEOUT,
    echo: Callable[[str], None] = lambda line: None,
    python: str = sys.executable,
) -> SmokeResult:
    """Run the smoke test of the project in ``project``; never raises for a failing project."""
    if not (project / "train.py").is_file():
        raise GenieError(_("{p} has no train.py: is it a genie project?").format(p=project))
    require_packages(spec, python)
    if spec.multi_node and FRAMEWORKS[spec.framework].torchrun:
        from genie import smoke_nodes

        return smoke_nodes.run(spec, project, machine, timeout, echo, python)
    with scratch.directory("smoke") as checkpoints:
        p = plan(spec, machine, Path(checkpoints), python)
        with _quiet_on_interrupt(echo) as gated:
            out = smoke_process.execute(p.argv, project, {**os.environ, **p.env}, timeout, gated)
    reports = parse_reports(out.lines)
    problems = judge(p, out.returncode, reports)
    if out.timed_out:
        problems.insert(
            0, _("timed out after {t:.0f} s; every process was killed").format(t=timeout)
        )
    output = "".join(out.lines)
    culprit = hung_rank(output) if out.timed_out else failed_rank(output)
    if culprit:
        problems.insert(1 if out.timed_out else 0, culprit)
    report = reports[-1] if reports else None
    return SmokeResult(p, out.returncode, out.seconds, out.timed_out, report, problems, output)


_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):.*?^\s*rank\s*:\s*(?P<rank>\d+).*?"
    r"^\s*exitcode\s*:\s*(?P<code>-?\d+)(?P<rest>.*?)^=+$",
    re.S | re.M,
)
_RAISED = re.compile(
    r"^\s*(?:\[\w+\]:)?\s*(?P<error>[\w.]*(?:Error|Exception|Interrupt): .*)$", re.M
)
_STACK_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|<frozen ")


def failed_rank(output: str) -> str | None:
    """The rank torchrun saw fail first, and how (its exception, exit code or signal)."""
    m = _ROOT_CAUSE.search(output)
    if m is None:
        return None
    rank, code = m.group("rank"), int(m.group("code"))
    raised = _RAISED.findall(m.group("rest"))
    if raised:
        how = raised[-1].strip()
    elif code < 0:
        how = _("killed by signal {n}").format(n=-code)
    else:
        how = _("exit code {code}").format(code=code)
    return _("rank {rank} failed first: {how}").format(rank=rank, how=how)


def hung_rank(output: str) -> str | None:
    """At a timeout, from each rank's stack dump: the ranks stuck outside torch (their
    peers wait for them inside a collective)."""
    where: dict[int, str] = {}
    current: dict[int, bool] = {}
    for line in output.splitlines():
        prefix = re.match(r"^\[[A-Za-z_]*(\d+)\]:", line)
        if prefix is None:
            continue
        rank, text = int(prefix.group(1)), line[prefix.end() :]
        if text.startswith(("Current thread", "Thread ")):
            current[rank] = text.startswith("Current thread") and rank not in where
            continue
        frame = _STACK_FRAME.match(text)
        if frame is None or not current.get(rank) or rank in where:
            continue
        current[rank] = False  # only the innermost frame of the main thread counts
        if not _LIBRARY.search(frame.group("path")):
            name = frame.group("path").rsplit("/", 1)[-1]
            where[rank] = f"{name}:{frame.group('line')} in {frame.group('func')}"
    if not where:
        return None
    return "; ".join(
        _("rank {rank} hung outside any collective, at {place}").format(rank=r, place=p)
        for r, p in sorted(where.items())
    )


@contextlib.contextmanager
def _quiet_on_interrupt(echo: Callable[[str], None]) -> Iterator[Callable[[str], None]]:
    """``echo``, silenced from the moment Ctrl-C arrives: what torchrun prints while it is
    being stopped (its own traceback) is not the user's concern."""
    quiet = threading.Event()

    def gated(line: str) -> None:
        if not quiet.is_set():
            echo(line)

    def on_interrupt(signum: int, frame: Any) -> None:
        quiet.set()
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_interrupt) if main else None
    try:
        yield gated
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def missing_packages(spec: Spec, python: str = sys.executable) -> list[str]:
    """What the project imports that ``python`` (the interpreter running the test) lacks."""
    from importlib.util import find_spec

    from genie import compat

    needed = ("torch", *compat.packages(spec.framework, spec.task, spec.tracker))
    if python == sys.executable:
        return [name for name in needed if find_spec(name) is None]
    probe = (
        "import importlib.util as u, sys; "
        "print(*[n for n in sys.argv[1:] if u.find_spec(n) is None])"
    )
    try:
        out = subprocess.run(
            [python, "-c", probe, *needed], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        raise GenieError(
            _("cannot run {py}: is it a Python interpreter?").format(py=python)
        ) from None
    return out.split()


def require_packages(spec: Spec, python: str) -> None:
    missing = missing_packages(spec, python)
    if missing:
        raise SmokeFailed(
            _(
                "the smoke test runs in {py}, which lacks {pkgs}: pip install -r "
                "requirements.txt there (or pass genie smoke --python PATH), then try again"
            ).format(py=python, pkgs=", ".join(missing))
        )
