"""FSDP (--strategy fsdp) really trains, matches DDP, and its sharded checkpoints load back:
at another number of processes, and as one file through the project's export.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ..conftest import TORCHRUN, run_genie
from .conftest import FSDP_STRAIGHT as STRAIGHT
from .conftest import OFFLINE, generate, report_of, torchrun

pytestmark = pytest.mark.e2e

RESHARDED = "resharded.pt"  # what tests/e2e/sharded_state.py writes
SHARDED_STATE = """
import torch, torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
import checkpoint, dist_utils, fsdp
from config import parse_args
from data import NUM_CLASSES
from model import build_model
from optim import build_optimizer, lr_schedule, make_scaler

args = parse_args()
device = dist_utils.setup(args.dist_timeout)
model = fsdp.build_sharded(lambda: build_model(args, NUM_CLASSES), device, args)
optimizer = build_optimizer(model, args)
scheduler = lr_schedule(optimizer, 100, args.warmup_ratio)
position = checkpoint.resume(args.checkpoint_dir, model, optimizer, make_scaler(args.precision),
                             scheduler, "continue")
full = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
if dist.get_rank() == 0:
    torch.save({"model": full[0], "optimizer": full[1], "step": position.step}, "resharded.pt")
dist_utils.shutdown()
"""


@pytest.mark.parametrize("task", ["custom", "cv", "nlp", "llm"])
def test_fsdp_project_passes_its_smoke_test_sharded(tmp_path, task):
    result = run_genie(
        "new", "p", "--yes", "--strategy", "fsdp", "--task", task, cwd=tmp_path, **OFFLINE
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    report = report_of(result.stdout)
    # measured by the project: FSDP wraps the model, the gathered weights agree, and the
    # sharded checkpoint loads into a fresh unsharded model with exactly those weights
    assert report["strategy"] == "fsdp" and report["world_size"] == 2
    assert report["checkpoint_loads"] is True and report["params_in_sync"] is True


@pytest.mark.parametrize("strategy", ["fsdp", "hsdp"])
def test_a_sharded_project_passes_its_smoke_test_on_two_simulated_nodes(tmp_path, strategy):
    """2 simulated nodes x 2 processes writing to one checkpoint folder (the filesystem every
    node shares, as the README asks): FSDP shards over the 4 ranks, HSDP within each node
    (a 2-D mesh: the report says how the model really is wrapped) and replicates across."""
    result = run_genie("new", "p", "--yes", "--strategy", strategy, "--nodes", "2",
                       "--master-addr", "10.1.1.1", cwd=tmp_path, **OFFLINE)  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    report = report_of(result.stdout)
    assert report["strategy"] == strategy and report["world_size"] == 4
    assert report["checkpoint_loads"] is True and report["params_in_sync"] is True


def export(project, folder: str):
    """The project's own export.py: a step folder as one file of weights."""
    import torch

    done = subprocess.run(
        [sys.executable, "export.py", folder, "model.pt"],
        cwd=project, capture_output=True, text=True, timeout=300, env={**os.environ, **OFFLINE},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "" and done.stdout.startswith("wrote model.pt: ")
    return torch.load(project / "model.pt", weights_only=True)


# The model FSDP builds (initialised in place, shard by shard), gathered: rank 0 writes it
# beside the same model built whole in one process with the same seed, and names the units.
INITIAL = """
import json, os, sys
import torch, torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule
import dist_utils, fsdp
from config import parse_args
from model import build_model

args = parse_args()
device = dist_utils.setup(args.dist_timeout)
dist_utils.seed_all(args.seed)
model = fsdp.build_sharded(lambda: build_model(args, 10), device, args)
gathered = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
if dist.get_rank() == 0:
    dist_utils.seed_all(args.seed)
    whole = build_model(args, 10).state_dict()
    torch.save({"sharded": gathered, "whole": whole}, os.environ["INITIAL"])
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    inside = {id(t) for unit in units[1:] for t in unit.modules()}
    rooted = [n for n, m in model.named_modules()
              if isinstance(m, torch.nn.Embedding) and id(m) not in inside]
    names = [type(m).__name__ for m in units]
    print("UNITS " + json.dumps({"units": names, "tables_in_root": rooted}), flush=True)
del model, gathered
dist_utils.shutdown()
# judged by what it saved and printed: gloo can still abort at exit (pytorch/pytorch#190489;
# "terminate called without an active exception", seen once in CI after all the above)
sys.stdout.flush()
os._exit(0)
"""


def initial_weights(project, out: str, *flags: str, nproc: int = 2) -> tuple[dict, list[str]]:
    import torch

    (project / "initial.py").write_text(INITIAL)
    run = torchrun(project, *flags, script="initial.py", nproc=nproc,
                   env={**OFFLINE, "INITIAL": out})  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Warning" not in run.stderr, run.stderr[-3000:]  # none per random op on the CPU
    units = json.loads(re.search(r"UNITS (\{.*\})", run.stdout).group(1))
    return torch.load(project / out, weights_only=True), units


# nlp: a DistilBERT from its config alone (trained from scratch), whose embeddings lie
# outside its blocks, with activation checkpointing
TASKS = {"custom": ("--smoke", "--hidden", "512", "--depth", "2"), "cv": ("--smoke",),
         "nlp": ("--model-name", "tiny", "--activation-checkpointing")}  # fmt: skip
BLOCKS = {"custom": "FSDPBlock", "cv": "FSDPBasicBlock", "nlp": "FSDPCheckpointWrapper"}


@pytest.mark.parametrize("task", TASKS)
def test_fsdp_initialises_each_shard_in_place_as_the_task_initialises_its_model(tmp_path, task):
    """No shard left empty or repeated on the other rank, the statistics of the task's
    own initialisation, the same weights for the same seed and number of processes; and
    the units: each block (as activation checkpointing wraps it) and each embedding table."""
    import torch

    project = generate(tmp_path, "--strategy", "fsdp", "--task", task)
    if task == "nlp":
        from transformers import DistilBertConfig

        DistilBertConfig(vocab_size=300, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                         max_position_embeddings=64).save_pretrained(project / "tiny")  # fmt: skip
    first, units = initial_weights(project, "first.pt", *TASKS[task])
    again, _ = initial_weights(project, "again.pt", *TASKS[task])
    sharded, whole = first["sharded"], first["whole"]
    assert sharded.keys() == whole.keys()
    for name, tensor in sharded.items():
        torch.testing.assert_close(tensor, again["sharded"][name], rtol=0, atol=0)
        expected = whole[name].float()
        if not tensor.is_floating_point() or expected.numel() < 2 or expected.std() == 0:
            torch.testing.assert_close(tensor, whole[name], rtol=0, atol=0, msg=name)
            continue
        half = tensor.shape[0] // 2  # FSDP shards the first dimension: a rank's rows
        if half:
            assert not torch.equal(tensor[:half], tensor[half : 2 * half]), name
        if expected.numel() >= 256:
            assert tensor.std().item() == pytest.approx(expected.std().item(), rel=0.15), name
            assert (
                abs(tensor.mean() - expected.mean())
                < 4 * expected.std() / expected.numel() ** 0.5 + 1e-6
            ), name
    assert units["units"].count(BLOCKS[task]) >= 2, units
    # the embedding tables are units of their own (DistilBERT: words, positions)
    assert units["tables_in_root"] == [], units
    assert units["units"].count("FSDPEmbedding") == (2 if task == "nlp" else 0), units


COMPILED = """
import sys
import torch
from torch import nn
from torch._dynamo.utils import counters
compiled = []  # what --compile compiles: the class of each module
module_compile, torch_compile = nn.Module.compile, torch.compile
def spy_module(self, *args, **kwargs):
    compiled.append(type(self).__name__)
    return module_compile(self, *args, **kwargs)
def spy_torch(model, *args, **kwargs):
    if isinstance(model, nn.Module):  # (Module.compile passes its own method)
        compiled.append(type(model).__name__)
    return torch_compile(model, *args, **kwargs)
nn.Module.compile, torch.compile = spy_module, spy_torch
import train
sys.argv = ["train.py", *sys.argv[1:]]
train.main()
print("FRAMES", counters["frames"]["ok"], "COMPILED", ",".join(compiled), flush=True)
"""


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_compile_compiles_each_block_and_learns_as_it_does_uncompiled(tmp_path, strategy):
    """--compile (DDP, or FSDP2 before sharding) compiles each block in place, not the
    wrapped model as a whole, with activation checkpointing too; the losses are eager's."""
    project = generate(tmp_path, "--strategy", strategy)
    (project / "compiled.py").write_text(COMPILED)
    reports, frames = {}, {}
    for name, extra in (("eager", ()), ("compiled", ("--compile", "--activation-checkpointing"))):
        run = torchrun(project, "--smoke", "--depth", "2", "--checkpoint-dir", name, *extra,
                       script="compiled.py")  # fmt: skip
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        reports[name] = report_of(run.stdout)
        frames[name] = max(int(x) for x in re.findall(r"FRAMES (\d+)", run.stdout))
        what = re.findall(r"COMPILED (\S*)", run.stdout)
    assert frames["eager"] == 0 and frames["compiled"] >= 2, frames  # a frame per block at least
    # --depth 2: two blocks on every rank (FSDP: the unit, the block's checkpoint wrapper)
    blocks = [names.split(",") for names in what]
    assert what and all(len(b) == 2 and {*b} <= {"Block", "CheckpointWrapper"} for b in blocks)
    for key in ("first_loss", "last_loss"):
        assert reports["compiled"][key] == pytest.approx(reports["eager"][key], rel=1e-4)


def test_on_the_cpu_another_number_of_processes_initialises_other_weights(tmp_path):
    """The README's caveat: without DTensor's random-number tracker (CPU), each shard draws
    from a seed of its own, so 1 and 2 processes start from different (valid) weights."""
    import torch

    project = generate(tmp_path, "--strategy", "fsdp")
    one, _ = initial_weights(project, "one.pt", "--smoke", nproc=1)
    two, _ = initial_weights(project, "two.pt", "--smoke")
    weights = [name for name, tensor in one["sharded"].items() if tensor.std() > 0]
    assert weights and not any(
        torch.equal(one["sharded"][name], two["sharded"][name]) for name in weights
    )


def test_fsdp_with_accumulation_ends_with_the_weights_ddp_ends_with(tmp_path):
    """Sharded gradients reduce-scattered at every micro-batch give DDP's updates; the
    exported sharded checkpoint holds them. DDP starts from the weights FSDP initialised
    in place (on the CPU, shard by shard, they are not the ones a whole build draws)."""
    import torch

    flags = ("--lr", "0.01", "--grad-accum", "2")
    ddp = generate(tmp_path, *flags, name="ddp")
    fsdp = generate(tmp_path, *flags, "--strategy", "fsdp", name="fsdp")
    initial, _ = initial_weights(fsdp, "initial.pt", "--smoke")
    torch.save(initial["sharded"], ddp / "initial.pt")
    model = (ddp / "model.py").read_text()
    (ddp / "model.py").write_text(model.replace(
        "\ndef build_model(", "\ndef build_model(*args):\n"
        "    built = build(*args)\n"
        "    built.load_state_dict(torch.load('initial.pt', weights_only=True))\n"
        "    return built\n\n\ndef build(", 1))  # fmt: skip
    for project in (ddp, fsdp):
        run = torchrun(project, "--smoke", "--checkpoint-dir", "ck")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    a = torch.load(ddp / "ck" / "last.pt", weights_only=True)
    b = export(fsdp, "ck/last")
    assert a["step"] == 16  # 2 epochs x 8 (--smoke sizes its data to them)
    assert (fsdp / "ck" / "last").resolve().name == "step-00000016"
    assert a["model"].keys() == b.keys()
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b[name], tensor, rtol=1e-5, atol=1e-6)


def final_weights(project, folder: str, tmp_path) -> dict:
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(project / folder / "last", tmp_path / f"{folder}.pt")
    return torch.load(tmp_path / f"{folder}.pt", weights_only=True)["model"]


def assert_same_end(project, folder: str, tmp_path) -> None:
    import torch

    a, b = final_weights(project, "straight", tmp_path), final_weights(project, folder, tmp_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), folder


@STRAIGHT
def test_a_preempted_fsdp_run_saves_its_shards_at_the_step_and_the_next_start_resumes(
    fsdp_straight, tmp_path
):
    """SIGUSR1 during step 5: every rank writes its shards after step 6 and exits 75; a
    plain start (no --resume, as a requeued job starts) resumes there and ends as the
    uninterrupted run ends."""
    straight = fsdp_straight
    env = {**OFFLINE, "GENIE_STOP_VOTE_SECONDS": "0", "GENIE_FAULT": "usr1:*:5"}
    first = torchrun(straight, "--smoke", "--epochs", "2", "--checkpoint-dir", "pre", env=env)
    out = first.stdout + first.stderr
    assert first.returncode != 0 and "exitcode  : 75" in out, out[-3000:]
    assert "SIGUSR1: stopped at step 6, checkpoint written to pre/last" in out
    assert (straight / "pre" / "last").resolve().name == "step-00000006"
    second = torchrun(straight, "--smoke", "--epochs", "2", "--checkpoint-dir", "pre")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed from pre/step-00000006 at epoch 0, step 6" in second.stdout
    assert report_of(second.stdout)["steps"] == 16
    assert_same_end(straight, "pre", tmp_path)


@STRAIGHT
def test_fsdp_workers_killed_twice_are_restarted_by_torchrun_and_end_the_same(
    fsdp_straight, tmp_path
):
    """torchrun --max_restarts: every worker killed at steps 5 and 12; each restart resumes
    from the newest step folder complete by then, and the run ends as the uninterrupted
    one."""
    straight = fsdp_straight
    env = {**OFFLINE, "GENIE_FAULT": "kill:*:5,12", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    done = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc_per_node=2", "--max_restarts=2", "train.py",
         "--smoke", "--epochs", "2", "--checkpoint-dir", "killed"],
        cwd=straight, env={**os.environ, **env}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The first kill comes 2 steps after the first save, whose write in the background may
    # not be complete yet (measured in CI: that restart started over, with nothing to
    # resume); the second comes 4 steps after the end of the first epoch's save.
    resumed = [int(x) for x in re.findall(r"resumed from killed/step-(\d+)", done.stdout)]
    assert resumed and resumed[-1] < 12 and all(s < 5 for s in resumed[:-1]), done.stdout[-3000:]
    assert report_of(done.stdout)["steps"] == 16
    assert_same_end(straight, "killed", tmp_path)


@pytest.fixture(scope="module")
def mid_epoch(tmp_path_factory):
    """An FSDP run on 2 processes stopped mid-epoch (step 12 of 16) by --max-steps, and its
    full state, read by one process from the sharded folder."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    tmp = tmp_path_factory.mktemp("mid-epoch")
    project = generate(tmp, "--strategy", "fsdp")
    run = torchrun(project, "--smoke", "--checkpoint-dir", "ck", "--max-steps", "12",
                   "--log-every", "1")  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    dcp_to_torch_save(project / "ck" / "step-00000012", tmp / "saved.pt")
    return project, run.stdout, tmp / "saved.pt"


MID_EPOCH = pytest.mark.xdist_group("fsdp-mid-epoch")  # one worker makes the fixture once


@MID_EPOCH
@pytest.mark.parametrize("nproc", [1, 4])
def test_a_sharded_checkpoint_resumes_at_another_number_of_processes(mid_epoch, tmp_path, nproc):
    """Written by 2 processes mid-epoch, resumed by 1 and by 4: the weights and the
    optimizer's moments load resharded, the step count goes on, and the loss continues;
    a folder whose save never finished is passed over."""
    import shutil

    import torch

    written, before, saved = mid_epoch
    project = tmp_path / "p"
    shutil.copytree(written, project, symlinks=True)
    (project / "sharded_state.py").write_text(SHARDED_STATE)
    state = torchrun(project, "--smoke", "--checkpoint-dir", "ck", script="sharded_state.py",
                     nproc=nproc)  # fmt: skip
    assert state.returncode == 0, state.stdout[-3000:] + state.stderr[-3000:]
    resharded, full = torch.load(project / RESHARDED, weights_only=True), torch.load(saved)
    assert resharded["step"] == 12
    for name, tensor in full["model"].items():
        torch.testing.assert_close(resharded["model"][name], tensor, rtol=0, atol=0)
    moments = full["optimizer"]["state"]
    assert moments and moments.keys() == resharded["optimizer"]["state"].keys()
    for name, moment in moments.items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(resharded["optimizer"]["state"][name][key], moment[key])
    # a save killed before DCP wrote its .metadata: a newer folder that never counts
    (project / "ck" / "step-00000099").mkdir()
    shutil.copy(project / "ck" / "step-00000012" / "__0_0.distcp", project / "ck" / "step-00000099")
    run = torchrun(project, "--smoke", "--checkpoint-dir", "ck", "--resume", "--log-every", "1",
                   "--epochs", "3", "--schedule-change", "continue", nproc=nproc)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "resumed from ck/step-00000012 at epoch 1, step 12" in run.stdout
    report = report_of(run.stdout)
    assert report["world_size"] == nproc and report["steps"] > 12
    assert report["checkpoint_loads"] is True
    # the loss continues where it was (a fresh model starts near ln 4 = 1.39): the first
    # step after the resume is within 3x of the last step before it
    last_before = float(re.search(r"step 12/\d+ loss ([0-9.]+)", before).group(1))
    assert report["first_loss"] < 3 * max(last_before, 0.05)


@MID_EPOCH
def test_a_full_state_checkpoint_of_earlier_projects_is_converted_once(mid_epoch, tmp_path):
    """genie's FSDP projects before sharded checkpoints wrote last.pt, the whole state on
    rank 0: an upgraded project resumes from it once, as a step folder, and keeps it."""
    import shutil

    import torch

    written, _before, saved = mid_epoch
    project = tmp_path / "p"
    shutil.copytree(written, project, symlinks=True)
    legacy = project / "old"
    legacy.mkdir()
    state = torch.load(saved)  # the weights and moments, whole, keyed by parameter name
    state.update(torch.load(project / "ck" / "step-00000012" / "train_state.pt"))
    torch.save(state, legacy / "last.pt")
    before = (legacy / "last.pt").read_bytes()
    run = torchrun(project, "--smoke", "--checkpoint-dir", "old", "--resume",
                   "--schedule-change", "continue")  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "converted old/last.pt, an earlier full-state checkpoint, into old/step-00000012" in (
        run.stdout
    )
    assert "resumed from old/step-00000012 at epoch 1, step 12" in run.stdout
    assert report_of(run.stdout)["steps"] == 16 and (legacy / "last.pt").read_bytes() == before


def test_a_start_never_writes_over_an_earlier_runs_folders(tmp_path):
    """A real run's folders: the same command again resumes them; a smoke run (which starts
    anew) stops with one line and leaves them untouched; a smoke run replaces an earlier
    smoke run's."""
    project = generate(tmp_path, "--strategy", "fsdp")
    real = ("--checkpoint-dir", "real", "--max-steps", "2", "--save-every", "2")
    first = torchrun(project, *real, "--num-workers", "0")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    kept = sorted(p.name for p in (project / "real" / "step-00000002").iterdir())
    again = torchrun(project, *real, "--num-workers", "0")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resumed from real/step-00000002 at epoch 0, step 2" in again.stdout
    assert not (project / "real" / "step-00000003").exists()  # --max-steps 2: done already
    refused = torchrun(project, "--smoke", "--checkpoint-dir", "real", "--num-workers", "0")
    assert refused.returncode != 0
    said = [line for line in refused.stderr.splitlines() if "earlier run" in line]
    assert said == [
        "real holds the checkpoints of an earlier run (step-00000002): pass --fresh to set "
        "them aside and start over, or another --checkpoint-dir"
    ]
    assert sorted(p.name for p in (project / "real" / "step-00000002").iterdir()) == kept
    for _ in range(2):  # the second smoke run replaces the first's folders
        smoke = torchrun(project, "--smoke", "--checkpoint-dir", "s")
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
