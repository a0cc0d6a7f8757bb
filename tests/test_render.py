"""Rendering: every variant is valid, formatted, lint-clean Python for its torch version."""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys

import black
import pytest

from genie.generate import archive, catalogue, engine, launch, write
from genie.spec.answers import ANSWERS_FILE

from . import goldens
from .conftest import (
    ROOT,
    call_keywords,
    call_names,
    project_code,
    render_variant,
    ruff_generated,
    spec_of,
)
from .variants import VARIANTS

# One worker renders every variant once for all of this module's tests (about 15 s of CPU),
# instead of each xdist worker rendering them all again.
pytestmark = pytest.mark.xdist_group("render")


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, bytes]]:
    return {variant: render_variant(variant) for variant in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_python_file_is_black_formatted_and_compiles(rendered, variant):
    for path, data in rendered[variant].items():
        if path.endswith(".py"):
            text = data.decode()
            assert black.format_str(text, mode=black.Mode()) == text, path
            compile(text, path, "exec")


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_project_passes_ruff_including_import_order(rendered, variant, tmp_path):
    write.write_project(tmp_path / "p", rendered[variant])
    result = ruff_generated(tmp_path / "p")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_code_carries_no_formatter_markers(rendered, variant):
    """Templates are shaped so that black formats them as written: a user never reads
    the formatter's workaround in their own code."""
    for path, data in rendered[variant].items():
        for marker in (b"fmt: skip", b"fmt: off"):
            assert marker not in data, (path, marker)


@pytest.mark.parametrize("variant", ["cpu-default", "fsdp-ddp-custom", "dp-custom"])
def test_train_py_reads_top_down_in_the_order_a_run_goes(rendered, variant):
    """Setup, the loop, the step, saving, then the driver: train.py reads in one pass from
    the top; genie's smoke harness is main()'s, never train()'s."""
    tree = ast.parse(rendered[variant]["train.py"].decode())
    functions = {n.name: i for i, n in enumerate(tree.body) if isinstance(n, ast.FunctionDef)}
    order = ["build_loaders", "build_run", "fit", "train_epoch", "save", "train", "main"]
    assert sorted(order, key=functions.__getitem__) == order
    [train] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train"]
    assert "smoke_check" not in ast.unparse(train)


@pytest.mark.parametrize(
    ("variant", "scaler", "device_id", "compile_"),
    [
        ("cpu-default", "torch.amp.GradScaler", True, "block.compile"),
        ("torch2.2-fp16", "torch.cuda.amp.GradScaler", False, "block.compile"),
        ("torch1.13-py3.10", "torch.cuda.amp.GradScaler", False, None),
    ],
)
def test_train_py_uses_only_apis_of_the_chosen_torch(
    rendered, variant, scaler, device_id, compile_
):
    source = project_code(rendered[variant])
    found = call_names(source)
    assert scaler in found
    assert {"torch.amp.GradScaler", "torch.cuda.amp.GradScaler"} - {scaler} - found
    assert ("device_id" in call_keywords(source, "dist.init_process_group")) is device_id
    assert {"torch.compile", "block.compile"} & found == ({compile_} if compile_ else set())
    assert "weights_only" in call_keywords(source, "torch.load")


def test_train_py_has_the_distributed_essentials(rendered):
    source = project_code(rendered["cpu-default"])
    found = call_names(source)
    for name in (
        "loader.sampler.set_epoch", "run.no_sync", "dist.destroy_process_group", "gc.collect",
        "dist_utils.prepare_once", "datetime.timedelta", "os.fsync", "dist.all_gather_object",
        "nn.utils.clip_grad_norm_", "os.replace", "dist.broadcast_object_list", "dist.all_reduce",
    ):  # fmt: skip
        assert name in found, name
    assert "no_sync = wrapped.no_sync" in source  # the DDP model's no_sync drives accumulation
    assert 'int(os.environ["LOCAL_RANK"])' in source
    assert "timeout" in call_keywords(source, "dist.init_process_group")  # --dist-timeout
    assert "drop_last" in call_keywords(source, "DataLoader")


@pytest.mark.parametrize("task", ["custom", "nlp", "cv"])
def test_task_code_is_shared_by_every_framework(rendered, task):
    """model.py and data.py come from one partial per task, whatever the framework."""
    base = rendered["cpu-default"] if task == "custom" else rendered[f"ddp-{task}"]
    for framework in ("lightning", "hf", "dp"):
        files = rendered[f"{framework}-{task}"]
        assert files["model.py"] == base["model.py"] and files["data.py"] == base["data.py"]


def test_lightning_sizes_the_trainer_from_torchrun(rendered):
    source = project_code(rendered["lightning-custom"])
    assert {"devices", "num_nodes", "strategy", "precision"} <= call_keywords(source, "L.Trainer")
    assert "pytorch_lightning" not in source  # one import style only


def test_hf_trainer_arguments(rendered):
    source = project_code(rendered["hf-nlp"])
    kws = call_keywords(source, "TrainingArguments")
    assert {"per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16",
            "ddp_find_unused_parameters", "use_cpu", "report_to"} <= kws  # fmt: skip


def test_dataparallel_is_plain_python_and_explains_itself(rendered):
    files = rendered["dp-custom"]
    assert "nn.DataParallel" in call_names(files["train.py"].decode())
    assert "exec python train.py" in files["launch/single_node.sh"].decode()
    assert "slower than DistributedDataParallel" in files["README.md"].decode()


@pytest.mark.parametrize(
    ("variant", "says"),
    [
        ("fsdp-ddp-custom", "PyTorch FullyShardedDataParallel (FSDP)"),
        ("fsdp-lightning-gpu", "PyTorch Lightning (FSDP strategy)"),
        ("fsdp-hf-gpu", "the Hugging Face Trainer (FSDP)"),
        ("cpu-default", "PyTorch DistributedDataParallel"),
    ],
)
def test_readme_and_file_list_name_what_trains_the_project(rendered, variant, says):
    from genie.detect import Machine

    readme = rendered[variant]["README.md"].decode().splitlines()[2]
    assert f"trained with {says} on PyTorch" in readme
    machine = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
    listing = dict(catalogue.project_files(spec_of(machine, name="p", **VARIANTS[variant])))
    assert listing["train.py"].startswith(f"training with {says}:")


def test_launch_scripts_and_readme_carry_the_planned_commands(rendered, cpu_machine):
    spec = spec_of(cpu_machine, **VARIANTS["multinode-static"])
    files = rendered["multinode-static"]
    line = launch.script_line(spec, launch.multi_node_args(spec))  # with CTRL_C_FLAG here
    assert launch.CTRL_C_FLAG in line and line in files["launch/multi_node.sh"].decode()
    readme = files["README.md"].decode()
    for command in launch.commands(spec):
        assert command.script in readme and launch.shell_join(command.argv) in readme
    assert "launch/multi_node.sh" not in rendered["cpu-default"]


def test_requirements_pin_the_chosen_torch_and_framework(rendered):
    def requirements(variant: str, name: str = "requirements.txt") -> str:
        return rendered[variant][name].decode()

    def pins(variant: str, name: str = "requirements.txt") -> list[str]:
        return [x for x in requirements(variant, name).splitlines() if not x.startswith("#")]

    # torch (and the packages built against it) in a file of their own: the rest installs
    # into an environment with another torch without replacing it
    assert pins("torch1.13-py3.10", "requirements-torch.txt") == ["torch>=1.13,<1.14"]
    assert pins("torch1.13-py3.10") == ["tqdm>=4.64", "tensorboard>=2.10", "six",
                                        "numpy<2"]  # fmt: skip
    assert pins("ddp-cv", "requirements-torch.txt") == ["torch>=2.14,<2.15",
                                                        "torchvision>=0.29,<0.30"]  # fmt: skip
    assert "torch" not in " ".join(pins("ddp-cv"))
    assert "numpy" not in requirements("cpu-default")
    # the tracker's package only when chosen; tqdm in every project (log lines go above
    # the bar through tqdm.write, whoever draws the bar)
    assert "tensorboard" not in requirements("tracker-none-lightning")
    assert "mlflow>=" in requirements("tracker-mlflow-hf") and "tqdm>=4.64" in requirements("hf-cv")
    assert "lightning>=" in requirements("lightning-custom")
    assert all(
        f"{p}>=" in requirements("hf-nlp") for p in ("transformers", "accelerate", "datasets")
    )
    assert "torchvision>=0.29,<0.30" in requirements("dp-cv", "requirements-torch.txt")


def test_user_text_is_never_rendered_as_jinja(cpu_machine):
    spec = dataclasses.replace(spec_of(cpu_machine), name="{{ 7*7 }}")
    readme = engine.render(spec)["README.md"].decode()
    assert readme.startswith("# {{ 7*7 }}\n")


@pytest.fixture(scope="module")
def golden(rendered) -> None:
    """Under GENIE_UPDATE_GOLDEN=1, the goldens rewritten from what genie renders now."""
    if os.environ.get("GENIE_UPDATE_GOLDEN"):
        goldens.store({variant: goldens.kept(files) for variant, files in rendered.items()})


@pytest.mark.parametrize("variant", VARIANTS)
def test_golden_snapshot(rendered, golden, variant):
    """Every template change shows up here, and in git diff tests/golden, as a readable diff.

    Regenerate after an intended change: GENIE_UPDATE_GOLDEN=1 pytest tests/test_render.py
    (tests/goldens.py says how the goldens are kept).
    """
    problems = goldens.differences(variant, goldens.kept(rendered[variant]))
    if problems:
        pytest.fail("\n".join([*problems, f"an intended change? {goldens.UPDATE}"]), pytrace=False)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_base_archive_holds_every_file_genie_wrote_but_its_answers(rendered, variant):
    files = dict(rendered[variant])
    kept = archive.unpack(files.pop(archive.ARCHIVE))
    del files[ANSWERS_FILE]  # genie upgrade writes it afresh from the answers
    assert kept == files
    assert archive.pack(kept) == rendered[variant][archive.ARCHIVE]  # the same bytes every time


def test_multi_node_script_checks_node_rank_and_runs_torchrun(tmp_path, rendered, cpu_machine):
    write.write_project(tmp_path / "p", rendered["multinode-static"])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "torchrun").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}

    def run(*args):
        return subprocess.run(
            ["bash", "launch/multi_node.sh", *args], cwd=tmp_path / "p", env=env,
            capture_output=True, text=True,
        )  # fmt: skip

    for bad in ([], ["x"], ["2"], ["-1"]):
        result = run(*bad)
        assert (
            result.returncode == 2 and "usage: bash launch/multi_node.sh NODE_RANK" in result.stderr
        )
    # the master must resolve and be routable here; the user's own LOCAL_ADDR wins
    # (no meet before the job: its e2e test runs it, no node 0 here)
    env.update(MASTER_ADDR="127.0.0.1", LOCAL_ADDR="10.9.9.9", JOIN_WAIT="0")
    result = run("1", "--smoke", "--epochs", "2")
    spec = spec_of(cpu_machine, **VARIANTS["multinode-static"])
    # torchrun leaves Ctrl-C to the script (it passes it on to the workers)
    expected = [
        launch.CTRL_C_FLAG,
        *launch.multi_node_args(spec, 1)[1:],
        "--smoke",
        "--epochs",
        "2",
    ]
    expected = [a.replace("$LOCAL_ADDR", "10.9.9.9") for a in expected]
    expected = [a.replace("10.0.0.1", "127.0.0.1") for a in expected]
    expected.insert(expected.index("--master_port=23456") + 1, "--rdzv_conf=timeout=900")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == expected
    assert "reaches 127.0.0.1 from 10.9.9.9 on lo" in result.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"}, (4, 2)),
        ({"SLURM_NTASKS_PER_NODE": "8(x2)", "SLURM_NNODES": "2"}, (8, 2)),
        ({}, (1, 1)),
    ],
)
def test_lightning_reads_the_topology_torchrun_or_slurm_launched(
    rendered, tmp_path, monkeypatch, env, expected
):
    write.write_project(tmp_path / "p", rendered["lightning-custom"])
    for key in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_NNODES"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(tmp_path / "p"))
    import importlib

    sys.modules.pop("dist_utils", None)
    dist_utils = importlib.import_module("dist_utils")
    try:
        assert dist_utils.topology() == expected
    finally:
        sys.modules.pop("dist_utils", None)


def test_every_readme_says_how_to_install_without_a_gpu_and_reuse_an_environment(rendered):
    cpu_index = "--index-url https://download.pytorch.org/whl/cpu"
    readme = (ROOT / "README.md").read_text()
    assert cpu_index in readme and "genie new ../demo" in readme and "pytest.ini" in readme
    for variant, files in rendered.items():
        text = files["README.md"].decode()
        assert cpu_index in text and "--python" in text, variant
        assert "pytest.ini" in files and b"[pytest]" in files["pytest.ini"], variant
        for script in ("launch/single_node.sh", "launch/multi_node.sh"):
            if script in files:
                assert b'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"' in files[script]


@pytest.mark.parametrize("variant", ["cpu-default", "multinode-c10d", "dp-custom"])
def test_project_readme_has_troubleshooting_written_for_this_project(rendered, variant):
    readme = rendered[variant]["README.md"].decode()
    section = readme.split("## Troubleshooting", 1)[1]
    assert "genie doctor --project ." in section and "nvidia-smi" in section
    assert "CUDA_VISIBLE_DEVICES" in section and "--batch-size" in section
    if variant != "dp-custom":
        for term in ("NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                     "Address already in use", "localhost"):  # fmt: skip
            assert term in section, term
    if variant == "multinode-c10d":
        assert "same environment" in section and "gpu-node-0.cluster:29500" in section
    if variant != "dp-custom":
        # data preparation: once for all nodes on a shared disk, else once per node
        assert "global rank 0 prepares it for every node" in readme
        assert "each node's first process prepares its own copy" in readme
