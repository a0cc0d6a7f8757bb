"""The smoke verdict comes only from the exit code and the GENIE_SMOKE line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from genie import contract
from genie.smoke import local, runner, verdict
from genie.spec import build_spec

from .conftest import GOOD_REPORT


def line(report: dict, prefix: str = "[default0]:") -> str:
    return prefix + contract.MARKER + json.dumps(report) + "\n"


def test_a_good_report_with_exit_0_passes(cpu_plan):
    assert verdict.judge(cpu_plan, 0, verdict.parse_reports(["noise\n", line(GOOD_REPORT)])) == []


@pytest.mark.parametrize(
    ("change", "returncode", "problem"),
    [
        ({}, 1, "torchrun exited with 1"),
        ({"world_size": 1}, 0, "trained with world size 1, launched 2"),
        ({"backend": "nccl"}, 0, "backend nccl, expected gloo"),
        ({"params_in_sync": False}, 0, "parameters differ across ranks"),
        ({"last_loss": float("nan")}, 0, "last_loss is not finite"),
        ({"first_loss": None}, 0, "first_loss is not finite"),
        ({"epoch_loss": float("inf")}, 0, "epoch_loss is not finite"),
        # did not learn: a gradient that does not descend leaves the loss where it began
        ({"epoch_loss": 2.4}, 0, "the model did not learn: the last epoch's mean loss 2.4000"),
        ({"epoch_loss": 1.2}, 0, "is not below 50% of the first step's 2.3000"),
        ({"steps": 0}, 0, "no optimizer step was taken"),
        ({"checkpoint_loads": False}, 0, "does not load back into a fresh model"),
        ({"val_accuracy": None}, 0, "no validation accuracy in [0, 1]"),
        ({"val_accuracy": 1.5}, 0, "no validation accuracy in [0, 1]"),
    ],
)
def test_a_bad_report_fails_with_the_reason(cpu_plan, change, returncode, problem):
    reports = verdict.parse_reports([line({**GOOD_REPORT, **change})])
    problems = verdict.judge(cpu_plan, returncode, reports)
    assert any(problem in p for p in problems), problems


def test_a_loss_that_fell_to_the_threshold_passes_and_just_above_fails(cpu_plan):
    at = {**GOOD_REPORT, "epoch_loss": contract.LEARNED * GOOD_REPORT["first_loss"]}
    assert verdict.judge(cpu_plan, 0, verdict.parse_reports([line(at)])) == []
    above = {**at, "epoch_loss": at["epoch_loss"] * 1.001}
    assert verdict.judge(cpu_plan, 0, verdict.parse_reports([line(above)])) != []


def test_no_report_line_fails_even_with_exit_0(cpu_plan):
    assert "training did not finish" in verdict.judge(cpu_plan, 0, [])[0]


def test_a_report_from_every_rank_fails(cpu_plan):
    reports = verdict.parse_reports([line(GOOD_REPORT), line(GOOD_REPORT, "[default1]:")])
    assert "only global rank 0 may print one" in verdict.judge(cpu_plan, 0, reports)[0]


def test_a_report_missing_keys_fails(cpu_plan):
    reports = verdict.parse_reports([line({"world_size": 2})])
    assert "report lacks backend" in verdict.judge(cpu_plan, 0, reports)[0]


def test_plan_adapts_to_a_cpu_machine_and_says_so(cpu_machine):
    raw = {"name": "p", "nodes": 2, "gpus_per_node": 8, "precision": "fp16", "master_addr": "h"}
    p = local.plan(build_spec(raw, cpu_machine), cpu_machine, Path("/ck"))
    assert (p.nproc, p.backend, p.device, p.precision) == (2, "gloo", "cpu", "bf16")
    assert p.env["CUDA_VISIBLE_DEVICES"] == ""
    assert "--nproc_per_node=2" in p.argv and p.argv[p.argv.index("--precision") + 1] == "bf16"
    assert any("fp16 needs CUDA" in n for n in p.notes)
    assert any("planned 2 node(s) x 8 processes; tested 1 node x 2" in n for n in p.notes)


def test_plan_uses_every_visible_gpu_with_nccl(gpu_machine):
    p = local.plan(
        build_spec({"name": "p", "precision": "fp16"}, gpu_machine), gpu_machine, Path("/c")
    )
    assert (p.nproc, p.backend, p.precision, p.notes) == (8, "nccl", "fp16", ())
    assert "CUDA_VISIBLE_DEVICES" not in p.env


def test_dataparallel_runs_one_process_on_every_device_and_checks_it(gpu_machine):
    p = local.plan(
        build_spec({"name": "p", "framework": "dp"}, gpu_machine), gpu_machine, Path("/c")
    )
    assert (p.nproc, p.backend, p.devices) == (1, "none", 8)
    assert "torch.distributed.run" not in p.argv and p.argv[1] == "train.py"
    good = {**GOOD_REPORT, "world_size": 1, "backend": "none", "devices": 8, "replicas": 1,
            "params_in_sync": None}  # fmt: skip
    assert verdict.judge(p, 0, verdict.parse_reports([line(good)])) == []
    problems = verdict.judge(p, 0, verdict.parse_reports([line({**good, "devices": 1})]))
    assert "trained on 1 device, expected 8" in problems
    # one copy of the weights is what DataParallel has; the judge checks that, not a
    # cross-rank comparison that never ran
    problems = verdict.judge(p, 0, verdict.parse_reports([line({**good, "replicas": 8})]))
    assert problems == ["DataParallel reported 8 weight copies, expected 1"]


def test_missing_framework_packages_are_named_before_anything_runs(cpu_machine, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "lightning" else real(name, *a),
    )
    spec = build_spec({"name": "p", "framework": "lightning"}, cpu_machine)
    assert runner.missing_packages(spec) == ["lightning"]
    assert runner.missing_packages(build_spec({"name": "p"}, cpu_machine)) == []


def test_missing_packages_are_asked_of_the_interpreter_that_will_run(cpu_machine, tmp_path):
    """--python points at another environment: genie asks that interpreter, not itself."""
    import sys

    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    spec = build_spec({"name": "p", "framework": "lightning", "task": "cv"}, cpu_machine)
    assert runner.missing_packages(spec, str(bare / "bin" / "python")) == [
        "torch", "lightning", "torchvision", "tqdm", "tensorboard",
    ]  # fmt: skip


def test_an_fsdp_project_must_report_that_fsdp_wrapped_the_model(cpu_machine):
    spec = build_spec({"name": "p", "strategy": "fsdp"}, cpu_machine)
    p = local.plan(spec, cpu_machine, Path("/ck"))
    sharded = {**GOOD_REPORT, "strategy": "fsdp", "checkpoint_loads": True}
    assert verdict.judge(p, 0, verdict.parse_reports([line(sharded)])) == []
    fell_back = verdict.judge(p, 0, verdict.parse_reports([line({**sharded, "strategy": "ddp"})]))
    assert fell_back == ["trained with strategy ddp, expected fsdp"]
    silent = verdict.judge(p, 0, verdict.parse_reports([line(GOOD_REPORT)]))
    assert silent == ["trained with strategy None, expected fsdp"]


@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_framework_fsdp_cannot_be_smoke_tested_without_gpus(cpu_machine, gpu_machine, framework):
    spec = build_spec(
        {"name": "p", "strategy": "fsdp", "framework": framework, "gpus_per_node": 8}, gpu_machine
    )
    assert "run `genie smoke` on a GPU node" in runner.unavailable(spec, cpu_machine)
    assert runner.unavailable(spec, gpu_machine) is None
    plain = build_spec({"name": "p", "strategy": "fsdp"}, cpu_machine)
    assert runner.unavailable(plain, cpu_machine) is None
    # plain PyTorch FSDP before torch 2.14 needs GPUs too (measured on 2.4 and 2.6)
    older = build_spec(
        {"name": "p", "strategy": "fsdp", "torch": "2.6", "python": "3.11", "gpus_per_node": 4},
        gpu_machine,
    )
    assert "FSDP on CPU works from torch 2.14" in runner.unavailable(older, cpu_machine)


def test_ctrl_c_silences_what_torchrun_prints_while_it_is_stopped():
    import os
    import signal

    import pytest

    from genie.smoke import local

    seen: list[str] = []
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN under a shell's background job
    with pytest.raises(KeyboardInterrupt):
        with local._quiet_on_interrupt(seen.append) as echo:
            echo("step 1")
            os.kill(os.getpid(), signal.SIGINT)
    echo("Traceback (most recent call last):")  # torchrun dying after Ctrl-C
    assert seen == ["step 1"]
    assert signal.getsignal(signal.SIGINT) is before  # put back as it was
