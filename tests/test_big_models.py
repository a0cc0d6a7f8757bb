"""What a 2-process CPU run cannot see: precision on GPUs without bf16, autocast in
DataParallel's replica threads, the GPU an NCCL barrier lands on before torch 2.3."""

from __future__ import annotations

import ast

import pytest

from . import goldens
from .conftest import calls, new_project, run_in
from .goldens import modules

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
    directory = new_project(tmp_path, gpu_machine, torch=torch_version)
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
    directory = new_project(tmp_path, gpu_machine, strategy="fsdp")
    done = run_in(directory, PRETEND_V100)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Tesla V100-SXM2-32GB has no native bf16, and FSDP here is generated for bf16 or fp32: "
        "use --precision fp32"
    ]


def test_dataparallel_replicas_compute_in_bf16_in_threads_of_their_own(tmp_path, cpu_machine):
    """Autocast is per thread: a thread started inside a bf16 region computes in fp32, unless
    the model enters autocast itself, as DataParallel's wrapper does."""
    directory = new_project(tmp_path, cpu_machine, framework="dp")
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


@pytest.mark.parametrize("variant", goldens.variants())
def test_every_barrier_goes_through_dist_utils_which_names_the_gpu_before_torch_2_3(variant):
    project = goldens.files(variant)
    for name, path in modules(variant).items():
        tree = ast.parse(path.read_text())
        for call in calls(tree, "dist.barrier"):
            owner = next(
                f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and f.lineno <= call.lineno <= (f.end_lineno or f.lineno)
            )  # fmt: skip
            assert (name, owner) == ("dist_utils.py", "barrier"), f"{variant}/{name}:{call.lineno}"
    dist_utils = project.get("dist_utils.py")
    if dist_utils is None:
        return
    requirements = project["requirements-torch.txt"].read_text()
    old = any(f"torch>={v}," in requirements for v in ("1.13", "2.0", "2.1", "2.2"))
    named = [c for c in calls(ast.parse(dist_utils.read_text()), "dist.barrier") if c.keywords]
    assert bool(named) == old, variant


# The FSDP configuration Lightning and the Trainer end up with, read back from their objects:
# bf16 compute, fp32 gradient reduction (as the ddp project's fully_shard policy has it).
LIGHTNING_FSDP = """
    import datetime, torch, config, train
    args = config.parse_args(["--precision", "bf16"])
    strategy = train.fsdp_strategy(train.Classifier(args), datetime.timedelta(minutes=1))
    policy = strategy.mixed_precision_config
    print(policy.param_dtype, policy.reduce_dtype)
"""
HF_FSDP = """
    import os, torch
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(29400 + os.getpid() % 1000))
    import config, train
    args = config.parse_args(["--precision", "bf16", "--smoke"])
    training_args = train.training_arguments(args)
    training_args.bf16 = True  # on this CPU the project itself would switch to fp32
    training_args.eval_strategy = "no"  # no evaluation set here
    trainer = train.DropLastTrainer(model=torch.nn.Linear(2, 2), args=training_args)
    # on a GPU, accelerate builds its FSDP plugin from these and applies the Trainer's bf16;
    # on this CPU it builds none, so the same two steps are taken here
    from accelerate.utils import FullyShardedDataParallelPlugin
    plugin = FullyShardedDataParallelPlugin(**trainer.args.fsdp_plugin_args)
    plugin.set_mixed_precision("bf16")
    policy = plugin.mixed_precision_policy
    print(policy.param_dtype, policy.reduce_dtype)
"""


@pytest.mark.parametrize(("framework", "code"), [("lightning", LIGHTNING_FSDP), ("hf", HF_FSDP)])
def test_fsdp_reduces_gradients_in_fp32_under_bf16_in_every_framework(
    tmp_path, gpu_machine, framework, code
):
    directory = new_project(tmp_path, gpu_machine, framework=framework, strategy="fsdp")
    done = run_in(directory, code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["torch.bfloat16", "torch.float32"], done.stdout
