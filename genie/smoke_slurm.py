"""``genie smoke --on slurm``: submit the project's own ``launch/slurm.sbatch --smoke`` with
``sbatch --wait`` (the test runs where the job runs: a login node has no GPUs), follow the
job's output file, judge its ``GENIE_SMOKE`` line, and cancel the job at the timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from genie import launch, smoke_process
from genie.errors import GenieError
from genie.i18n import _
from genie.smoke import SmokePlan, SmokeResult, failed_rank, judge, parse_reports, run_env
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
        tuple(launch.sbatch_args(("--smoke",), wait=True)), env, spec.world_size,
        "nccl" if gpus else "gloo", "cuda" if gpus else "cpu", spec.precision, (note,),
        strategy=spec.strategy,
    )  # fmt: skip


def output_file(spec: Spec, project: Path, job_id: str) -> Path:
    """Where ``#SBATCH --output=logs/%x-%j.out`` puts the job's output."""
    return project / launch.SLURM_LOGS / f"{spec.name}-{job_id}.out"


def run(
    spec: Spec,
    project: Path,
    timeout: float,
    echo: Callable[[str], None] = lambda line: None,
    python: str = sys.executable,
) -> SmokeResult:
    """Submit, wait, judge; never raises for a failing project (only for a missing SLURM)."""
    if spec.scheduler != "slurm" or not (project / launch.SLURM_SCRIPT).is_file():
        raise GenieError(
            _("{p} has no {s}: generate it with --scheduler slurm").format(
                p=project, s=launch.SLURM_SCRIPT
            )
        )
    p = plan(spec, project)
    (project / launch.SLURM_LOGS).mkdir(exist_ok=True)
    # The job inherits this environment (sbatch --export=ALL): torchrun and python are
    # the ones of the interpreter that has the project's packages.
    path = f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, **p.env, "PATH": path}
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            p.argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
        )  # fmt: skip
    except OSError as err:
        raise GenieError(_("cannot run sbatch: {e}").format(e=err)) from None
    assert proc.stdout is not None
    job_id = proc.stdout.readline().strip().split(";")[0]
    lines: list[str] = []
    timed_out = False
    try:
        out = output_file(spec, project, job_id) if job_id else None
        while proc.poll() is None:
            if time.perf_counter() - started > timeout:
                timed_out = True
                if job_id:
                    subprocess.run(["scancel", job_id], env=env, capture_output=True, timeout=30)
                smoke_process.kill_tree(proc)
                break
            _follow(out, lines, echo)
            time.sleep(POLL)
        proc.wait()
        _follow(out, lines, echo, final=True)
    except BaseException:
        if job_id:
            subprocess.run(["scancel", job_id], env=env, capture_output=True, timeout=30)
        smoke_process.kill_tree(proc)
        raise
    errors = proc.stderr.read() if proc.stderr else ""
    if not job_id:
        lines.append(errors)
    reports = parse_reports(lines)
    problems = judge(p, proc.returncode, reports)
    if timed_out:
        problems.insert(
            0, _("timed out after {t:.0f} s; SLURM job {j} was cancelled").format(
                t=timeout, j=job_id)
        )  # fmt: skip
    elif not job_id:
        problems.insert(0, _("sbatch refused the job: {e}").format(e=errors.strip()))
    elif culprit := failed_rank("".join(lines)):  # as on this machine: which rank, and how
        problems.insert(0, culprit)
    return SmokeResult(
        p, proc.returncode, time.perf_counter() - started, timed_out,
        reports[-1] if reports else None, problems, "".join(lines),
    )  # fmt: skip


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
