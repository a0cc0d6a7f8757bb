"""Checkpoints: written atomically by rank 0, read back to resume.

A checkpoint holds everything a resume needs: weights, optimizer moments, loss scale,
LR schedule, every rank's random-number state, and where training stands.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

import dist_utils


@dataclass
class Position:
    """Where training stands: last finished epoch, optimizer steps, best accuracy."""

    epoch: int = -1
    step: int = 0
    best: float = -1.0


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


def load_state(path: Path) -> dict:
    """Read a checkpoint this project wrote onto the CPU (not GPU 0 from every rank)."""
    return torch.load(
        path, map_location="cpu", weights_only=True
    )  # tensors and plain data


def check_fits(model, state, path: Path) -> None:
    """Stop with one line when ``path`` was written for another model (another size,
    task or framework): a resume must not die in load_state_dict with a traceback."""
    own = model.state_dict()
    theirs = state.get("model") if isinstance(state, dict) else None
    if not isinstance(theirs, dict):
        problem = "it is not a checkpoint of this project (no model weights in it)"
    elif own.keys() != theirs.keys():
        missing = sorted(own.keys() - theirs.keys())
        extra = sorted(theirs.keys() - own.keys())
        problem = (
            f"it lacks {missing[0]}" if missing else f"it has {extra[0]}, unknown here"
        )
    else:
        shapes = [k for k in own if tuple(own[k].shape) != tuple(theirs[k].shape)]
        if not shapes:
            return
        name = shapes[0]
        problem = (
            f"{name} is {list(theirs[name].shape)} there, {list(own[name].shape)} here"
        )
    message = (
        f"--resume: {path} does not fit this model: {problem}; it was written for "
        "another model size, task or framework (use another --checkpoint-dir, or "
        "start afresh)"
    )
    raise SystemExit(message if dist.get_rank() == 0 else 1)  # one line, from rank 0


def training_state(model, optimizer, scaler, scheduler, position: Position) -> dict:
    """What a checkpoint holds; every rank calls it (it gathers)."""
    model_state, optimizer_state = model.state_dict(), optimizer.state_dict()
    return {
        "model": model_state,
        "optimizer": optimizer_state,
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": dist_utils.all_rng_states(),
        **asdict(position),
    }


def resume(path: Path, model, optimizer, scaler, scheduler) -> Position | None:
    """Load ``path`` into every rank (a collective); None when there is no checkpoint.

    Only rank 0 writes checkpoints, so on clusters without a shared filesystem the other
    nodes do not have the file: rank 0 reads it and sends it to every rank.
    """
    payload = [load_state(path) if dist.get_rank() == 0 and path.exists() else None]
    dist.broadcast_object_list(payload, src=0)
    state = payload[0]
    if state is None:
        return None
    check_fits(model, state, path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    scheduler.load_state_dict(state["scheduler"])
    if (
        len(state["rng"]) == dist.get_world_size()
    ):  # else: another world size, fresh seeds
        dist_utils.set_rng_state(state["rng"][dist.get_rank()])
    return Position(state["epoch"], state["step"], state["best"])
