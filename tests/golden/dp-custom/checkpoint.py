"""Checkpoints: written atomically, read back to resume.

A checkpoint holds everything a resume needs: weights, optimizer moments, loss scale,
LR schedule, the random-number state, and where training stands.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.data.distributed import DistributedSampler

from optim import resume_schedule

GENIE_ANSWERS = Path(__file__).with_name(".genie.yml")  # what genie was asked
# A preempted run leaves this file beside last.pt: the next start resumes.
PREEMPTED = "PREEMPTED"


@dataclass
class Position:
    """Where training stands: the last finished epoch, optimizer steps, the best
    accuracy, and the micro-batches of the next epoch already trained (a checkpoint
    written mid-epoch: by --save-every, a preemption or --max-steps)."""

    epoch: int = -1
    step: int = 0
    best: float = -1.0
    batches: int = 0


class ResumableSampler(DistributedSampler):
    """A DistributedSampler that can start an epoch part-way. Its order is fixed by the
    seed and the epoch, so a resumed epoch skips the samples already trained without
    reading them."""

    def __init__(self, dataset, **kwargs) -> None:
        super().__init__(dataset, **kwargs)
        self.skip = 0  # samples of this rank's share of the epoch to leave out

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self):
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return self.num_samples - self.skip


def save_atomic(path: Path, state: dict) -> None:
    """Write a temp file in the same directory, fsync it, rename it over ``path``, and
    fsync the directory: a crash at any moment leaves the previous checkpoint whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself is durable only once its directory is
    finally:
        os.close(fd)


def save_checkpoints(directory: Path, state: dict, improved: bool, keep: int) -> None:
    """last.pt always; best.pt when validation improved; the newest --keep epoch-N.pt.

    Each file appears atomically; best.pt and epoch-N.pt are hard links to the file just
    written (no second write), or copies where the filesystem has no hard links.
    """
    last = directory / "last.pt"
    save_atomic(last, state)
    names = (["best.pt"] if improved else []) + (
        [f"epoch-{state['epoch']:04d}.pt"] if keep else []
    )
    for name in names:
        tmp = directory / (name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            os.link(last, tmp)
        except OSError:
            shutil.copyfile(last, tmp)
        os.replace(tmp, directory / name)
    fsync_directory(directory)
    for old in sorted(directory.glob("epoch-*.pt"))[:-keep] if keep else []:
        old.unlink()


def load_state(path: Path, mmap: bool = False) -> dict:
    """Read a checkpoint this project wrote onto the CPU (not GPU 0 from every
    rank); with ``mmap``, the tensors stay on disk until used."""
    # weights_only: nothing but tensors and plain data is unpickled.
    return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def shapes(weights) -> dict[str, list[int]] | None:
    """Name -> shape of a state dict's tensors; None when ``weights`` is not a dict."""
    if not isinstance(weights, dict):
        return None
    return {name: list(t.shape) for name, t in weights.items() if hasattr(t, "shape")}


def misfit(own: dict, theirs: dict | None) -> str | None:
    """What keeps a checkpoint's weights (``theirs``) from loading into a model shaped
    ``own`` (both name -> shape, see shapes()); None when they fit."""
    if not theirs:
        return "it is not a checkpoint of this project (no model weights in it)"
    if own.keys() != theirs.keys():
        missing = sorted(own.keys() - theirs.keys())
        if missing:
            return f"it lacks {missing[0]}"
        return f"it has {sorted(theirs.keys() - own.keys())[0]}, unknown here"
    for name, shape in own.items():
        if theirs[name] != shape:
            return f"{name} is {theirs[name]} there, {shape} here"
    return None


def stop_if_misfit(path: Path | str, problem: str | None) -> None:
    """Stop a resume from ``path`` with one line when it was written for another model
    (another size, task or framework), before loading it fails with a traceback."""
    if problem is not None:
        stop(
            f"--resume: {path} does not fit this model: {problem}; it was written for "
            "another model size, task or framework (use another --checkpoint-dir, or "
            "start afresh)"
        )


def stop(message: str) -> None:
    """End the run with one line, no traceback."""
    raise SystemExit(message)


def training_state(
    model, optimizer, scaler, scheduler, position: Position, args
) -> dict:
    """What a checkpoint holds, with how the run was made (its arguments and genie's
    answers)."""
    model_state, optimizer_state = model.state_dict(), optimizer.state_dict()
    return {
        "model": model_state,
        "optimizer": optimizer_state,
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": {"python": random.getstate(), "torch": torch.get_rng_state()},
        **asdict(position),
        "config": {
            "args": {
                k: v if isinstance(v, (int, float, bool, type(None))) else str(v)
                for k, v in vars(args).items()
            },
            "genie": GENIE_ANSWERS.read_text() if GENIE_ANSWERS.exists() else None,
        },
    }


def resume(
    path: Path, model, optimizer, scaler, scheduler, change: str | None
) -> Position | None:
    """Load ``path``; None when there is no checkpoint."""
    if not path.exists():
        return None
    state = load_state(path)
    stop_if_misfit(path, misfit(shapes(model.state_dict()), shapes(state.get("model"))))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    resume_schedule(scheduler, state["scheduler"], state["step"], change)
    random.setstate(state["rng"]["python"])
    torch.set_rng_state(state["rng"]["torch"])
    return Position(
        state["epoch"], state["step"], state["best"], state.get("batches", 0)
    )
