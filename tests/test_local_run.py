"""A project planned for the cluster, run on the machine that made it (a laptop, CPU only):
its own scripts adapt as `genie smoke` does, and say so in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import new_project, run_in

CPU_FP16 = """
    import os
    import torch
    torch.cuda.is_available = lambda: False
    os.environ["RANK"] = "{rank}"
    import config
    print("PRECISION", config.parse_args(["--precision", "fp16"]).precision)
"""


@pytest.mark.parametrize("framework", ["ddp", "lightning", "hf", "dp"])
def test_fp16_on_a_machine_without_cuda_trains_in_bf16_and_says_so_once(
    tmp_path, gpu_machine, framework
):
    directory = new_project(tmp_path, gpu_machine, framework=framework, precision="fp16")
    rank0 = run_in(directory, CPU_FP16.format(rank=0))
    assert rank0.returncode == 0, rank0.stderr
    assert "PRECISION bf16" in rank0.stdout
    assert rank0.stderr.strip() == (
        "no CUDA here: training in bf16 instead of fp16 (--precision fp32 for full precision)"
    )
    rank1 = run_in(directory, CPU_FP16.format(rank=1))  # the others adapt too, silently
    assert "PRECISION bf16" in rank1.stdout and rank1.stderr == ""


def test_the_documented_local_install_keeps_the_torch_installed(tmp_path, cpu_machine):
    """A project for the cluster's older torch, installed into genie's environment as its
    README says: pip resolves it from what is installed, nothing to fetch, torch untouched."""
    from genie import compat

    directory = new_project(tmp_path, cpu_machine, torch="2.6", task="cv")
    readme = (directory / "README.md").read_text()
    command = compat.install_command(torch=False)
    assert f"`{command}` there keeps its torch" in readme
    pip, install, *files = command.split()
    argv = [sys.executable, "-m", pip, install, "--no-index", "--dry-run", *files]
    done = subprocess.run(argv, cwd=directory, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Would install" not in done.stdout
    # the cluster's install still pins its torch (which is not here: pip would fetch it)
    cluster = (directory / "requirements-torch.txt").read_text()
    assert "torch>=2.6,<2.7" in cluster and "torchvision>=0.21,<0.22" in cluster
