"""What a 2-process CPU run cannot see: precision on GPUs without bf16, autocast in
DataParallel's replica threads, the GPU an NCCL barrier lands on before torch 2.3."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from genie.generate import engine, write
from genie.spec import build_spec

from .test_generated_rules import GOLDEN, VARIANTS, calls, modules


def project(tmp_path, machine, **answers):
    spec = build_spec({"name": "p", **answers}, machine)
    write.write_project(tmp_path / "p", engine.render(spec))
    return tmp_path / "p"


def run_in(directory, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=directory,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


PRETEND_V100 = """
    import torch
    torch.cuda.is_available = lambda: True
    torch.cuda.is_bf16_supported = lambda including_emulation=True: including_emulation
    torch.cuda.get_device_capability = lambda device=None: (7, 0)
    torch.cuda.get_device_name = lambda device=None: "Tesla V100-SXM2-32GB"
    import config
    args = config.parse_args(["--precision", "bf16"])
    print("PRECISION", args.precision)
"""


@pytest.mark.parametrize("torch_version", ["2.14", "2.2"])
def test_bf16_on_a_gpu_without_it_falls_back_to_fp16_with_one_line(tmp_path, gpu_machine,
                                                                   torch_version):  # fmt: skip
    directory = project(tmp_path, gpu_machine, torch=torch_version)
    done = run_in(directory, PRETEND_V100)
    assert done.returncode == 0, done.stderr
    assert "PRECISION fp16" in done.stdout
    assert done.stderr.strip() == (
        "Tesla V100-SXM2-32GB has no native bf16: training in fp16 with a loss scaler instead "
        "(--precision fp32 for full precision)"
    )
    native = run_in(
        directory,
        PRETEND_V100.replace("(7, 0)", "(8, 0)").replace(
            "including_emulation=True: including_emulation", "including_emulation=True: True"
        ),
    )
    assert "PRECISION bf16" in native.stdout and native.stderr == ""


def test_fsdp_on_a_gpu_without_bf16_stops_with_one_line(tmp_path, gpu_machine):
    directory = project(tmp_path, gpu_machine, strategy="fsdp")
    done = run_in(directory, PRETEND_V100)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Tesla V100-SXM2-32GB has no native bf16, and FSDP here is generated for bf16 or fp32: "
        "use --precision fp32"
    ]


def test_dataparallel_replicas_compute_in_bf16_in_threads_of_their_own(tmp_path, cpu_machine):
    """Autocast is per thread: a thread started inside a bf16 region computes in fp32, unless
    the model enters autocast itself, as DataParallel's wrapper does."""
    directory = project(tmp_path, cpu_machine, framework="dp")
    done = run_in(
        directory,
        """
        import threading, torch
        from train import Autocast, autocast_dtype
        layer = torch.nn.Linear(4, 4)
        found = {}
        def replica(name, module):
            found[name] = module(torch.ones(2, 4)).dtype
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for name, module in (("plain", layer),
                                 ("wrapped", Autocast(layer, "cpu", autocast_dtype("bf16")))):
                thread = threading.Thread(target=replica, args=(name, module))
                thread.start()
                thread.join()
        print(found["plain"], found["wrapped"])
    """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch.float32", "torch.bfloat16"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_barrier_goes_through_dist_utils_which_names_the_gpu_before_torch_2_3(variant):
    for path in modules(variant):
        tree = ast.parse(path.read_text())
        for call in calls(tree, "dist.barrier"):
            owner = next(
                f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and f.lineno <= call.lineno <= (f.end_lineno or f.lineno)
            )  # fmt: skip
            assert (path.name, owner) == ("dist_utils.py", "barrier"), f"{path}:{call.lineno}"
    dist_utils = GOLDEN / variant / "dist_utils.py"
    if not dist_utils.exists():
        return
    requirements = (GOLDEN / variant / "requirements.txt").read_text()
    old = any(f"torch>={v}," in requirements for v in ("1.13", "2.0", "2.1", "2.2"))
    named = [c for c in calls(ast.parse(dist_utils.read_text()), "dist.barrier") if c.keywords]
    assert bool(named) == old, variant
