"""The CPUs, and so the DataLoader workers, a SLURM job step gets, with and without the
``SRUN_CPUS_PER_TASK`` line of a generated ``launch/slurm.sbatch``: a real one-node SLURM
(the tests' own, with ``TaskPlugin=task/affinity`` and ``TaskPluginParam=Cores``, so that
a step's task is bound to the cores it was given), a job of one task with
``--cpus-per-task=2``, and in each step the project's own ``config.default_workers()`` for
one process per node.

Rows: no variable (what srun gives a step since Slurm 22.05 when nothing passes
--cpus-per-task on); ``SRUN_CPUS_PER_TASK=1`` (the same, said explicitly); the project's
line.

    sudo python bench/slurm_cpus.py

Needs root, slurm-wlm and munge (as the SLURM tests); takes about a minute.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import slurm_cluster  # noqa: E402

PROBE = (
    "import os, config; "
    "print(len(os.sched_getaffinity(0)), 'CPUs,', config.default_workers(), 'workers')"
)
JOB = """#!/usr/bin/env bash
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --output={out}
cd {project}
export LOCAL_WORLD_SIZE=1
probe() {{ srun {python} -c "{probe}"; }}
echo "no variable: $(probe)"
echo "SRUN_CPUS_PER_TASK=1: $(SRUN_CPUS_PER_TASK=1 probe)"
{line}
echo "the project's line: $(probe)"
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "genie", "new", "p", "--yes", "--no-smoke", "--scheduler",
             "slurm", "--gpus-per-node", "0", "--nproc-per-node", "1"],
            cwd=tmp, check=True, capture_output=True,
        )  # fmt: skip
        project = tmp / "p"
        sbatch = (project / "launch" / "slurm.sbatch").read_text().splitlines()
        [line] = [s for s in sbatch if s.startswith("export SRUN_CPUS_PER_TASK=")]
        out = tmp / "job.out"
        job = tmp / "job.sh"
        job.write_text(
            JOB.format(out=out, project=project, python=sys.executable, probe=PROBE, line=line)
        )
        cluster = slurm_cluster.start(tmp / "slurm", bind_cores=True)
        try:
            subprocess.run(["sbatch", str(job)], env=cluster.env, check=True, capture_output=True)
            version = subprocess.run(
                ["sbatch", "--version"], env=cluster.env, capture_output=True, text=True
            ).stdout.strip()
            deadline = time.monotonic() + 120
            while "project's line" not in (out.read_text() if out.exists() else ""):
                if time.monotonic() > deadline:
                    sys.exit(f"the job did not finish:\n{cluster.log()}")
                time.sleep(1)
        finally:
            cluster.stop()
        print(f"{version}, 1 task, --cpus-per-task=2, task/affinity bound to cores")
        print(f"  ({line})")
        print(out.read_text().rstrip())


if __name__ == "__main__":
    main()
