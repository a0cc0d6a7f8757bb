"""``genie smoke --on slurm``: submit the project's own ``launch/slurm.sbatch --smoke`` with
``sbatch --wait`` (the test runs where the job runs: a login node has no GPUs), follow the
job's output file, judge its ``GENIE_SMOKE`` line, and cancel the job at the timeout.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from genie.errors import GenieError
from genie.generate import launch
from genie.i18n import _
from genie.smoke import process
from genie.smoke.plan import RunOptions, SmokePlan, SmokeResult, run_env
from genie.smoke.verdict import failed_rank, judge, parse_reports
from genie.spec import Spec

POLL = 0.5  # seconds between looks at the job's output file


def plan(spec: Spec, project: Path) -> SmokePlan:
    """The submission and what the job must report: the script's own topology (pure)."""
    gpus = bool(spec.gpus_per_node)
    env = run_env(project / "checkpoints" / "smoke")
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    note = _("submitted {script} --smoke to SLURM: {n} node(s) x {p} processes").format(
        script=launch.SLURM_SCRIPT, n=spec.nodes, p=spec.processes_per_node
    )
    return SmokePlan(
        tuple(launch.sbatch_args(("--smoke",), wait=True)),
        env,
        spec.world_size,
        "nccl" if gpus else "gloo",
        "cuda" if gpus else "cpu",
        spec.precision,
        (note,),
        strategy=spec.strategy,
    )


def output_file(spec: Spec, project: Path, job_id: str) -> Path:
    """Where ``#SBATCH --output=logs/%x-%j.out`` puts the job's output."""
    return project / launch.SLURM_LOGS / f"{spec.name}-{job_id}.out"


@dataclass
class _Job:
    """A submitted job as seen from here: sbatch's process, its id, what its output said."""

    proc: subprocess.Popen
    job_id: str
    env: dict[str, str]
    lines: list[str] = field(default_factory=list)
    timed_out: bool = False

    def cancel(self) -> None:
        if self.job_id:
            subprocess.run(["scancel", self.job_id], env=self.env, capture_output=True, timeout=30)
        process.kill_tree(self.proc)


def run(spec: Spec, project: Path, options: RunOptions) -> SmokeResult:
    """Submit, wait, judge; never raises for a failing project (only for a missing SLURM)."""
    if spec.scheduler != "slurm" or not (project / launch.SLURM_SCRIPT).is_file():
        raise GenieError(
            _("{p} has no {s}: generate it with --scheduler slurm").format(
                p=project, s=launch.SLURM_SCRIPT
            )
        )
    p = plan(spec, project)
    (project / launch.SLURM_LOGS).mkdir(exist_ok=True)
    started = time.perf_counter()
    job = _submit(p, project, options.python)
    try:
        _wait(job, output_file(spec, project, job.job_id), started, options)
    except BaseException:
        job.cancel()
        raise
    return _result(p, job, time.perf_counter() - started, options.timeout)


def _submit(p: SmokePlan, project: Path, python: str) -> _Job:
    # The job inherits this environment (sbatch --export=ALL): torchrun and python are
    # the ones of the interpreter that has the project's packages.
    path = f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, **p.env, "PATH": path}
    try:
        proc = process.popen(p.argv, project, env, merge_stderr=False)
    except OSError as err:
        raise GenieError(_("cannot run sbatch: {e}").format(e=err)) from None
    assert proc.stdout is not None
    return _Job(proc, proc.stdout.readline().strip().split(";")[0], env)


def _wait(job: _Job, out: Path, started: float, options: RunOptions) -> None:
    """Follow the job's output until sbatch --wait returns; cancel it at the timeout."""
    out_file = out if job.job_id else None
    while job.proc.poll() is None:
        if time.perf_counter() - started > options.timeout:
            job.timed_out = True
            job.cancel()
            break
        _follow(out_file, job.lines, options.echo)
        time.sleep(POLL)
    job.proc.wait()
    _follow(out_file, job.lines, options.echo, final=True)


def _result(p: SmokePlan, job: _Job, seconds: float, timeout: float) -> SmokeResult:
    errors = job.proc.stderr.read() if job.proc.stderr else ""
    if not job.job_id:
        job.lines.append(errors)
    reports = parse_reports(job.lines)
    problems = judge(p, job.proc.returncode, reports)
    if job.timed_out:
        problems.insert(
            0,
            _("timed out after {t:.0f} s; SLURM job {j} was cancelled").format(
                t=timeout, j=job.job_id
            ),
        )
    elif not job.job_id:
        problems.insert(0, _("sbatch refused the job: {e}").format(e=errors.strip()))
    elif culprit := failed_rank("".join(job.lines)):  # as on this machine: which rank, and how
        problems.insert(0, culprit)
    report = reports[-1] if reports else None
    output = "".join(job.lines)
    return SmokeResult(p, job.proc.returncode, seconds, job.timed_out, report, problems, output)


def _follow(
    out: Path | None, lines: list[str], echo: Callable[[str], None], final: bool = False
) -> None:
    """Echo what the job's output file gained since the last look (whole lines, and the
    rest once the job has ended)."""
    if out is None or not out.is_file():
        return
    text = out.read_text(errors="replace")
    have = "".join(lines)
    if len(text) <= len(have):
        return
    new = text[len(have) :]
    complete = new if final else new[: new.rfind("\n") + 1]
    for line in complete.splitlines(keepends=True):
        lines.append(line)
        echo(line.rstrip("\n"))
