"""The proof: run the converted script under torchrun through :mod:`genie.convert.probe` and judge
the exit code and the probe's one line. Planning and judging are pure; :func:`run` launches
torchrun in its own session and kills the whole tree on timeout, like the smoke test."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genie import contract, scratch
from genie.convert import probe
from genie.detect import Machine
from genie.i18n import _
from genie.smoke import process
from genie.smoke.plan import SmokePlan, SmokeResult
from genie.smoke.verdict import parse_reports

# The share of training steps at which processes may have trained on the same batch: a
# split loader repeats a few at most (DistributedSampler pads its last batches).
SHARED = 0.2


def plan(
    script: Path,
    args: Sequence[str],
    machine: Machine,
    python: str = sys.executable,
    collective_timeout: float = 60.0,
) -> SmokePlan:
    """2 CPU processes with gloo, or every visible GPU with NCCL when there are 2 or more; a
    collective that waits more than ``collective_timeout`` seconds fails (a hang, found)."""
    genie_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (genie_root, os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    env[probe.TIMEOUT_ENV] = f"{collective_timeout:g}"
    if machine.gpus >= 2:
        nproc, backend, device = machine.gpus, "nccl", "cuda"
    else:
        nproc, backend, device = contract.CPU_PROCESSES, "gloo", "cpu"
        env["CUDA_VISIBLE_DEVICES"] = ""  # one GPU cannot hold two NCCL ranks: test on CPU
    argv = (
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--tee=3",
        "-m",
        "genie.convert.probe",
        str(script),
        *args,
    )
    return SmokePlan(argv, env, nproc, backend, device, _("as written"), ())


def judge(p: SmokePlan, returncode: int | None, reports: list[dict[str, Any]]) -> list[str]:
    """Why the converted script failed its check; empty when it passed."""
    problems = []
    if returncode != 0:
        problems.append(_("torchrun exited with {rc}").format(rc=returncode))
    if len(reports) != 1:
        problems.append(
            _(
                "the probe reported {n} times, not once (did the script join the process group?)"
            ).format(n=len(reports))
        )
        return problems
    report = reports[0]
    missing = [k for k in probe.KEYS if k not in report]
    if missing:
        return [*problems, _("probe report lacks {k}").format(k=", ".join(missing))]
    if report["world_size"] != p.nproc:
        problems.append(_("world size {w}, launched {n}").format(w=report["world_size"], n=p.nproc))
    if report["models"] < 1:
        problems.append(_("no DistributedDataParallel model was built"))
    if report["ranks_trained"] != p.nproc or report["steps"] < 1:
        problems.append(
            _("only {r} of {n} processes ran backward()").format(
                r=report["ranks_trained"], n=p.nproc
            )
        )
    problems.extend(_data_parallel_problems(p, report))
    if report["params_in_sync"] is not True:
        problems.append(_("parameters differ across processes after training"))
    return problems


def _data_parallel_problems(p: SmokePlan, report: dict[str, Any]) -> list[str]:
    """What shows that DDP itself trained, on different data per process."""
    problems = []
    if report["models"] >= 1 and report["ranks_forwarded"] != p.nproc:
        problems.append(
            _(
                "only {r} of {n} processes trained through a DDP model (the model that trains "
                "is not the one wrapped?)"
            ).format(r=report["ranks_forwarded"], n=p.nproc)
        )
    elif report["models"] >= 1 and report["ranks_allreduced"] != p.nproc:
        problems.append(
            _("only {r} of {n} processes all-reduced gradients").format(
                r=report["ranks_allreduced"], n=p.nproc
            )
        )
    if report["ranks_forwarded"] == p.nproc and report["inputs_differ"] is not True:
        problems.append(_("the processes trained on the same first batch: the data is not split"))
    elif report["ranks_forwarded"] == p.nproc and report["inputs_shared"] > SHARED:
        problems.append(
            _("at {s:.0%} of the steps processes trained on the same batch: the data is "
              "not split after the first").format(s=report["inputs_shared"])  # fmt: skip
        )
    if report["indexed_steps"] and report["indices_shared"] > SHARED:
        problems.append(
            _("at {s:.0%} of the steps processes read the same samples (the DataLoader's "
              "indices): the data is not split").format(s=report["indices_shared"])  # fmt: skip
        )
    return problems


def run(
    script: Path,
    args: Sequence[str],
    machine: Machine,
    timeout: float,
    *,
    echo: Callable[[str], None] = lambda line: None,
    python: str = sys.executable,
    cwd: Path | None = None,
) -> SmokeResult:
    """Run the check in ``cwd``, by default a new temporary directory (what the script writes
    with relative paths, such as checkpoints, is thrown away and cannot replace a file of the
    user's); never raises for a failing script."""
    if cwd is None:
        with scratch.directory("check") as temporary:
            return run(
                script, args, machine, timeout, echo=echo, python=python, cwd=Path(temporary)
            )
    p = plan(script.absolute(), args, machine, python, collective_timeout=max(timeout / 3, 5.0))
    run_ = process.execute(p.argv, cwd, {**os.environ, **p.env}, timeout, echo)
    lines, timed_out = run_.lines, run_.timed_out
    reports = parse_reports(lines, probe.MARKER)  # smoke's reader: glued prefixes, splits
    problems = judge(p, run_.returncode, reports)
    if timed_out:
        problems.insert(
            0, _("timed out after {t:.0f} s; every process was killed").format(t=timeout)
        )
    report = reports[0] if len(reports) == 1 else None
    return SmokeResult(p, run_.returncode, run_.seconds, timed_out, report, problems)
