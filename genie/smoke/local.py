"""The smoke test on this machine: the project's ``--smoke`` under torchrun (all GPUs with
NCCL, else 2 CPU processes with gloo), or one process for DataParallel.

:func:`plan` (pure) decides what can be tested here; :func:`run` launches it in its own
process group, streams its output and enforces the timeout on the whole tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from genie import compat, contract, scratch
from genie.detect import Machine
from genie.generate import launch
from genie.i18n import _
from genie.registry import FRAMEWORKS
from genie.smoke import process
from genie.smoke.plan import RunOptions, SmokePlan, SmokeResult, cpu_precision, run_env, train_args
from genie.smoke.verdict import failed_rank, hung_rank, judge, parse_reports
from genie.spec import Spec


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
        nproc, backend, device = contract.CPU_PROCESSES, "gloo", "cpu"
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
            found.append(
                _("ran on torch {here}; the project targets torch {want}").format(
                    here=here, want=spec.torch
                )
            )
    if compat.parse_minor(machine.python) != compat.parse_minor(spec.python):
        found.append(
            _("ran on Python {here}; the project targets Python {want}").format(
                here=machine.python, want=spec.python
            )
        )
    if found:
        found.append(
            _(
                "to test the real versions: {install} into an environment with Python {py}, "
                "then genie smoke --python PATH/TO/ITS/python"
            ).format(install=compat.install_command(), py=spec.python)
        )
    return found


def run(spec: Spec, project: Path, options: RunOptions) -> SmokeResult:
    """Run the smoke test of the project in ``project``; never raises for a failing project."""
    with scratch.directory("smoke") as checkpoints:
        p = plan(spec, options.machine, Path(checkpoints), options.python)
        with _quiet_on_interrupt(options.echo) as gated:
            env = {**os.environ, **p.env}
            out = process.execute(p.argv, project, env, options.timeout, gated)
    reports = parse_reports(out.lines)
    problems = judge(p, out.returncode, reports)
    if out.timed_out:
        problems.insert(
            0, _("timed out after {t:.0f} s; every process was killed").format(t=options.timeout)
        )
    output = "".join(out.lines)
    culprit = hung_rank(output) if out.timed_out else failed_rank(output)
    if culprit:
        problems.insert(1 if out.timed_out else 0, culprit)
    report = reports[-1] if reports else None
    return SmokeResult(p, out.returncode, out.seconds, out.timed_out, report, problems, output)


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
