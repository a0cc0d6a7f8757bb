"""Checkpoints genie's code writes (ddp and dp: Lightning and the HF Trainer write their own):
a process killed while saving leaves the previous checkpoint loadable; and a resume from a
checkpoint of another model stops with one line, in every framework and under FSDP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .. import goldens
from .conftest import CPU_ENV, FSDP_STRAIGHT, THIS_PYTHON, elastic_group, generate, torchrun

pytestmark = pytest.mark.e2e
# genie writes the checkpoints itself in these (checkpoint.py); distributed and not
WRITERS = ["cpu-default", "dp-custom"]

SAVE = """
import sys, time
from pathlib import Path
import torch
import checkpoint

path, value, stall = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "stall"
state = {"model": {"w": torch.full((4,), value)}, "epoch": 0, "step": 1, "best": 0.0}
if stall:  # write part of the file, then stop: the test kills us here
    def partial(obj, f):
        f.write(b"PK-half-written")
        f.flush()
        print("SAVING", flush=True)
        time.sleep(120)
    torch.save = partial
checkpoint.save_checkpoints(path.parent, state, improved=True, keep=2)
print("SAVED", flush=True)
"""


def save(project: Path, directory: Path, value: float, stall: bool) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SAVE, str(directory / "last.pt"), str(value),
         "stall" if stall else "ok"],
        cwd=project, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(project)},
    )  # fmt: skip


@pytest.mark.parametrize("variant", WRITERS)
def test_a_process_killed_while_saving_leaves_the_previous_checkpoint_loadable(variant, tmp_path):
    import torch

    project = goldens.unpack(variant, tmp_path / variant)
    ck = tmp_path / "ck"
    first = save(project, ck, 1.0, stall=False)
    assert first.communicate(timeout=120)[0].strip() == "SAVED"
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    dying = save(project, ck, 2.0, stall=True)
    assert dying.stdout is not None and dying.stdout.readline().strip() == "SAVING"
    dying.send_signal(signal.SIGKILL)
    dying.wait()
    for name in ("last.pt", "best.pt"):
        assert (ck / name).read_bytes() == before[name], name
        state = torch.load(ck / name, map_location="cpu", weights_only=True)
        assert torch.equal(state["model"]["w"], torch.full((4,), 1.0))
    # the half-written temp file never replaced anything, and the next save goes through
    again = save(project, ck, 3.0, stall=False)
    assert again.communicate(timeout=120)[0].strip() == "SAVED"
    state = torch.load(ck / "last.pt", map_location="cpu", weights_only=True)
    assert torch.equal(state["model"]["w"], torch.full((4,), 3.0))
    assert not list(ck.glob("*.tmp"))


LIGHTNING_SAVE = """
import sys, time
from pathlib import Path
import torch
from fsspec.implementations.local import LocalFileOpener
from lightning.pytorch.plugins.io import TorchCheckpointIO

path, value, stall = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "stall"
state = {"state_dict": {"w": torch.full((4,), value)}, "global_step": 1}
if stall:  # write part of the file, then stop: the test kills us here
    def partial(self, data):
        self.f.write(bytes(data)[:64])
        self.f.flush()
        print("SAVING", flush=True)
        time.sleep(120)
    LocalFileOpener.write = partial
TorchCheckpointIO().save_checkpoint(state, path)  # what Lightning's Trainer saves through
print("SAVED", flush=True)
"""


def test_lightning_killed_while_saving_leaves_the_previous_last_ckpt_loadable(tmp_path):
    """Lightning writes its checkpoints itself (the project resumes from its last.ckpt):
    the installed Lightning writes a temporary file and moves it into place, so a process
    killed mid-write leaves the last complete last.ckpt."""
    import torch

    ck = tmp_path / "last.ckpt"

    def save(value: float, stall: bool) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", LIGHTNING_SAVE, str(ck), str(value), "stall" if stall else "ok"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    assert save(1.0, stall=False).communicate(timeout=120)[0].strip() == "SAVED"
    before = ck.read_bytes()
    dying = save(2.0, stall=True)
    assert dying.stdout is not None and dying.stdout.readline().strip() == "SAVING"
    dying.send_signal(signal.SIGKILL)
    dying.wait()
    assert ck.read_bytes() == before
    state = torch.load(ck, map_location="cpu", weights_only=True)
    assert torch.equal(state["state_dict"]["w"], torch.full((4,), 1.0))


FITS = """
import sys
from pathlib import Path
import torch
from torch import nn
import checkpoint

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
cases = {
    "fits": {"model": model.state_dict()},
    "size": {"model": nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)).state_dict()},
    "task": {"model": {"encoder.weight": torch.zeros(2)}},
    "foreign": {"state_dict": {}},
}
own, theirs = checkpoint.shapes(model.state_dict()), cases[sys.argv[1]].get("model")
try:
    checkpoint.stop_if_misfit(Path("ck/last.pt"), checkpoint.misfit(own, checkpoint.shapes(theirs)))
except SystemExit as stop:
    print("STOP", stop.code)
else:
    print("OK")
"""


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("fits", "OK"),
        ("size", "STOP ck/last.pt does not fit this model: 0.weight is [32, 8] there, "
                 "[16, 8] here; it was written for another model size, task or framework"),
        ("task", "STOP ck/last.pt does not fit this model: it lacks 0.bias"),
        ("foreign", "STOP ck/last.pt does not fit this model: it is not a checkpoint"),
    ],
)  # fmt: skip
def test_a_checkpoint_of_another_model_stops_the_resume_with_one_line(case, said, tmp_path):
    # the check is the same code in every variant that has it
    project = goldens.unpack("dp-custom", tmp_path / "dp-custom")
    out = subprocess.run(
        [sys.executable, "-c", FITS, case], cwd=project, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(project)}, check=True,
    ).stdout  # fmt: skip
    assert out.startswith(said) and out.count("\n") == 1, out


def test_smoke_never_touches_real_checkpoints_and_a_misfit_resume_is_one_line(tmp_path):
    """Real training, then the README's smoke check, then a resume: the real checkpoints stay
    byte for byte; resuming from the smoke model's checkpoint stops with one line."""
    project = generate(tmp_path)
    env = {**os.environ, **CPU_ENV, **THIS_PYTHON}

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "launch/single_node.sh", "--num-workers", "0", *args],
            cwd=project, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    real = launch("--epochs", "1", "--max-steps", "3")
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    checkpoints = project / "checkpoints"
    before = {p.name: p.read_bytes() for p in checkpoints.glob("*.pt")}
    assert {"last.pt", "best.pt"} <= set(before)
    import torch

    # --max-steps stopped inside epoch 0: its position, not a finished epoch (no epoch file)
    state = torch.load(checkpoints / "last.pt", map_location="cpu", weights_only=True)
    assert (state["epoch"], state["step"], state["batches"]) == (-1, 3, 3)
    assert not list(checkpoints.glob("epoch-*.pt"))
    smoke = launch("--smoke")
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]
    assert (checkpoints / "smoke" / "last.pt").is_file()
    assert {p.name: p.read_bytes() for p in checkpoints.glob("*.pt")} == before
    resumed = launch("--eval-only")  # loads the real last.pt, writes nothing
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    misfit = launch("--resume", "--checkpoint-dir", "checkpoints/smoke")
    output = misfit.stdout + misfit.stderr
    assert misfit.returncode != 0
    said = [line for line in output.splitlines() if "does not fit this model" in line]
    assert len(said) == 1, output[-3000:]  # once, from rank 0
    assert "checkpoints/smoke/last.pt does not fit this model: " in said[0]
    assert "it lacks net." in said[0]  # the smoke model is smaller: the first missing layer
    assert "size mismatch" not in output and "[rank0]: Traceback" not in output
    assert {p.name: p.read_bytes() for p in checkpoints.glob("*.pt")} == before


def tracebacks_besides_torchrun(output: str) -> int:
    """Tracebacks in ``output`` other than torchrun's own ChildFailedError (which it raises
    whenever a worker fails; its report says when a worker left a traceback too)."""
    return output.count("Traceback") - output.count("errors.ChildFailedError")


@pytest.mark.parametrize(
    ("variant", "newest"),
    [
        pytest.param("lightning", "last.ckpt", marks=elastic_group("lightning")),
        pytest.param("hf", "checkpoint-24", marks=elastic_group("hf")),
        pytest.param("fsdp", "step-00000016", marks=FSDP_STRAIGHT),
    ],
)
def test_resuming_the_checkpoints_of_another_model_size_stops_with_one_line(
    request, variant, newest
):
    """The full-size model resumed from the --smoke model's checkpoints (the elastic test's
    uninterrupted run; FSDP: its step folders, every rank its shards): Lightning, the HF
    Trainer and FSDP stop before loading anything, with one line from rank 0 and no
    traceback from any worker."""
    if variant == "fsdp":
        project = request.getfixturevalue("fsdp_straight")
    else:
        project = request.getfixturevalue("elastic_runs")(variant).project
    checkpoints = Path("straight")
    resumed = torchrun(project, "--num-workers", "0", "--resume", "--checkpoint-dir",
                       str(checkpoints), timeout=300)  # fmt: skip
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode != 0
    said = [line for line in output.splitlines() if "does not fit this model" in line]
    assert len(said) == 1, output[-3000:]  # once, from rank 0
    # the smoke model has one hidden layer less: the first missing weight is named
    assert said[0].startswith(f"{checkpoints / newest} does not fit this model: ")
    assert "it lacks " in said[0] and "another model size, task or framework" in said[0]
    assert tracebacks_besides_torchrun(output) == 0, output[-5000:]
    assert "size mismatch" not in output
