"""FSDP (--strategy fsdp) really trains, matches DDP, and its sharded checkpoints load back:
at another number of processes, and as one file through the project's export.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ..conftest import run_genie
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


@pytest.mark.parametrize("task", ["custom", "cv", "nlp"])
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


def test_fsdp_with_accumulation_ends_with_the_weights_ddp_ends_with(tmp_path):
    """Sharded gradients reduce-scattered at every micro-batch give DDP's updates; the
    exported sharded checkpoint holds them."""
    import torch

    flags = ("--lr", "0.01", "--grad-accum", "2")
    ddp = generate(tmp_path, *flags, name="ddp")
    fsdp = generate(tmp_path, *flags, "--strategy", "fsdp", name="fsdp")
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


def test_a_start_without_resume_never_writes_over_an_earlier_runs_folders(tmp_path):
    """The newest folder would be resumed for this run's and its own rotated away: a real
    run's folders stop a start without --resume, smoke run or not, with one line and
    untouched; a smoke run replaces an earlier smoke run's."""
    project = generate(tmp_path, "--strategy", "fsdp")
    real = ("--checkpoint-dir", "real", "--max-steps", "2", "--save-every", "2")
    first = torchrun(project, *real, "--num-workers", "0")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    kept = sorted(p.name for p in (project / "real" / "step-00000002").iterdir())
    for again in (real, ("--smoke", "--checkpoint-dir", "real")):
        refused = torchrun(project, *again, "--num-workers", "0")
        assert refused.returncode != 0
        said = [line for line in refused.stderr.splitlines() if "earlier run" in line]
        assert said == [
            "real holds the checkpoints of an earlier run (step-00000002): pass --resume to "
            "continue it, or another --checkpoint-dir to start afresh"
        ]
    assert sorted(p.name for p in (project / "real" / "step-00000002").iterdir()) == kept
    for _ in range(2):  # the second smoke run replaces the first's folders
        smoke = torchrun(project, "--smoke", "--checkpoint-dir", "s")
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
