"""genie plan for real: a 7B Llama-shaped model (its config only) traced on fake tensors at
16 ranks, and two rows of bench/plan_accuracy.py's table (traced beside real tensors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.plan_accuracy import LLAMA_7B, ROWS, table

from ..conftest import ROOT, run_genie
from .conftest import CPU_ENV, generate

pytestmark = pytest.mark.e2e
TOPOLOGY = ("--nodes", "2", "--gpus-per-node", "8", "--master-addr", "10.0.0.1")
# the tests reading seven_b on one xdist worker: it is planned once, not once per worker
SEVEN_B = pytest.mark.xdist_group("plan-7b")


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory) -> tuple[dict, Path]:
    """One plan of the 7B model under ddp on 2 x 8 GPUs of 80 GiB, with its suggestions."""
    where = tmp_path_factory.mktemp("plan")
    (where / "llama-7b").mkdir()
    (where / "llama-7b" / "config.json").write_text(json.dumps(LLAMA_7B))
    project = generate(where, "--task", "llm", *TOPOLOGY, "--batch-size", "4",
                       "--scheduler", "none")  # fmt: skip
    result = run_genie("plan", str(project), "--json", "--gpu-memory", "80GiB", "--",
                       "--model-name", str(where / "llama-7b"), "--seq-len", "4096",
                       **CPU_ENV)  # fmt: skip
    assert result.returncode == 1, result.stderr  # 1: it does not fit
    return json.loads(result.stdout), project


def hand_count(report: dict, ranks: int) -> dict[str, int]:
    """fp32 parameters and two fp32 AdamW moments split over ``ranks``; plus the rotary
    embedding's inverse frequencies (two buffers every rank holds, the frequencies and their
    original: head size / 2 floats each) and AdamW's step count (a float per parameter
    tensor)."""
    count = report["model_parameters"]
    head = LLAMA_7B["hidden_size"] // LLAMA_7B["num_attention_heads"]
    tensors = 9 * LLAMA_7B["num_hidden_layers"] + 3  # 7 matrices + 2 norms a layer; 3 more
    return {"parameters": count * 4 // ranks + 2 * (head // 2 * 4),
            "optimizer": 2 * count * 4 // ranks + 4 * tensors}  # fmt: skip


@SEVEN_B
def test_a_7b_model_does_not_fit_16_gpus_with_ddp(seven_b):
    report, _project = seven_b
    # 6,738,415,616 parameters: 32 layers of 4H^2 + 3HI + 2H, two V x H tables, a norm
    assert report["model_parameters"] == 6_738_415_616
    rank = report["ranks"][0]
    assert {k: rank[k] for k in ("parameters", "optimizer")} == hand_count(report, 1)
    assert rank["gradients"] == report["model_parameters"] * 4  # DDP's buckets
    assert report["verdict"]["fits"] is False and rank["total"] > 80 * 2**30
    assert report["method"] == "traced" and report["gpu_memory"] == 80 * 2**30


@SEVEN_B
def test_it_fits_with_fsdp_and_activation_checkpointing(seven_b):
    report, _project = seven_b
    offered = {s["change"]: s for s in report["suggestions"]}
    assert not offered["activation checkpointing"]["fits"]  # ddp's states alone: 100 GiB
    assert not offered["fsdp"]["fits"]  # sharded states, whole activations
    both = offered["all of the above"]
    assert both["fits"] and "--strategy fsdp" in both["flags"]
    assert "--activation-checkpointing" in both["flags"]
    assert {k: both[k] for k in ("parameters", "optimizer")} == hand_count(report, 16)
    assert both["activations"] < offered["fsdp"]["activations"] / 4


@SEVEN_B
def test_the_text_report_says_the_same(seven_b, tmp_path):
    """The same plan printed for people, for a project made with the flags that fit."""
    report, project = seven_b
    both = {s["change"]: s for s in report["suggestions"]}["all of the above"]
    fitting = generate(tmp_path, "--task", "llm", *TOPOLOGY, "--scheduler", "none",
                       *both["flags"].split())  # fmt: skip
    result = run_genie("plan", str(fitting), "--gpu-memory", "H100", "--", "--model-name",
                       str(project.parent / "llama-7b"), "--seq-len", "4096", **CPU_ENV)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "16 ranks, fsdp, bf16, micro-batch 4, activation checkpointing" in result.stdout
    assert "fits in 79.65 GiB" in result.stdout and "traced on fake tensors" in result.stdout


def test_traced_peaks_are_within_10_percent_of_real_ones(tmp_path):
    rows = table(tmp_path, [ROWS[2], ROWS[5]])  # custom fsdp fp32 x 2, llm ddp bf16 x 2
    assert all(abs(r["error"]) <= 0.10 for r in rows), rows


def test_a_python_without_the_projects_requirements_is_one_line(tmp_path):
    project = generate(tmp_path, "--task", "custom")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "bare"], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")  # no torch
    result = run_genie("plan", str(project), "--python", bare, **CPU_ENV)
    assert result.returncode == 2
    assert "the project's modules do not load with" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# Runs a plan's setup for real in the project's folder, with the address space capped at
# what it has after one warm-up step plus BUDGET: exit 3 when an allocation fails. glibc
# maps each large tensor of its own (a fixed mmap threshold), so that freed memory leaves
# the address space and the cap measures the live tensors, as a GPU's memory would.
LIMITED = """
import json, os, resource, sys
sys.path[:0] = [os.getcwd(), sys.argv[1]]
import trace, config
variant, budget = json.loads(sys.argv[2]), int(sys.argv[3])
args = config.parse_args(sys.argv[4:])
trace.unpadded_as_in_a_real_run()
trace.trace(args, {**variant, "batch": 1, "real": True})  # libraries and thread pools
size = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1])
resource.setrlimit(resource.RLIMIT_AS, (size * 1024 + budget,) * 2)
try:
    trace.trace(args, {**variant, "real": True})
except (MemoryError, RuntimeError) as error:
    print(str(error).splitlines()[0]); sys.exit(3)
"""
LIMITED_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1"}


def test_what_the_plan_says_does_not_fit_fails_and_its_suggestions_run(tmp_path):
    """A 6.3M-parameter MLP at micro-batch 4096 on one process, on 250 MiB: the plan says
    it does not fit and offers checkpointing and a smaller micro-batch; with the address
    space capped at 250 MiB, the step as planned fails and each suggestion runs."""
    project = generate(tmp_path, "--task", "custom", "--nproc-per-node", "1",
                       "--batch-size", "4096")  # fmt: skip
    model = ["--hidden", "1024", "--depth", "6"]
    result = run_genie("plan", str(project), "--json", "--gpu-memory", "250MiB", "--", *model,
                       **CPU_ENV)  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    fitting = [s for s in report["suggestions"] if s["fits"]]
    assert {s["change"] for s in fitting} >= {"activation checkpointing",
                                              "micro-batch 2048, accumulating 2"}  # fmt: skip

    def run(setup: dict) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", LIMITED, str(ROOT / "genie" / "plan"), json.dumps(setup),
                str(250 * 2**20), *model]  # fmt: skip
        return subprocess.run(argv, cwd=project, capture_output=True, text=True,
                              env={**os.environ, **CPU_ENV, **LIMITED_ENV})  # fmt: skip

    planned = run(report["setup"])
    assert planned.returncode == 3 and "can't allocate memory" in planned.stdout, planned.stderr
    for suggestion in fitting:
        if (
            suggestion["change"] == "activation checkpointing"
            or "micro-batch" in suggestion["change"]
        ):
            setup = {**report["setup"], **suggestion_setup(suggestion["flags"])}
            done = run(setup)
            assert done.returncode == 0, (suggestion["change"], done.stdout, done.stderr[-2000:])


def suggestion_setup(flags: str) -> dict:
    """The traced setup a flag line makes (one process here: world and shard stay 1)."""
    words = flags.split()
    return {"strategy": words[words.index("--strategy") + 1],
            "precision": words[words.index("--precision") + 1],
            "checkpointing": "--activation-checkpointing" in words,
            "batch": int(words[words.index("--batch-size") + 1])}  # fmt: skip


def test_genie_new_says_whether_it_fits_and_genie_plan_reads_the_answer(tmp_path):
    """The summary of genie new --yes traces the project it is about to write against the
    GPUs' memory answered, and prints the verdict and the changes (the wizard offers the
    first one that fits); genie plan then takes that memory from the project's answers."""
    flags = (*TOPOLOGY, "--scheduler", "none", "--batch-size", "65536", "--gpu-memory",
             "1100MiB")  # fmt: skip
    new = run_genie("new", "big", "--yes", "--no-smoke", *flags, cwd=tmp_path, **CPU_ENV)
    assert new.returncode == 0, new.stdout + new.stderr
    lines = new.stdout.splitlines()
    peak = next(line for line in lines if line.startswith("Peak memory per rank (genie plan)"))
    assert "does not fit in 1.07 GiB" in new.stdout
    fits = [line.strip() for line in lines if line.strip().startswith("✓")]
    assert fits and fits[0].startswith("✓ micro-batch 16384, accumulating 4")
    assert fits[0].endswith("--batch-size 16384 --grad-accum 4")
    plan = run_genie("plan", str(tmp_path / "big"), "--json", **CPU_ENV)
    assert plan.returncode == 1, plan.stderr  # 1: does not fit
    report = json.loads(plan.stdout)
    assert report["gpu_memory"] == 1100 * 2**20
    assert f"{report['ranks'][0]['total'] / 2**30:.2f} GiB" in peak
