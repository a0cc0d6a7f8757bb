"""Checkpoints: written atomically by rank 0, read back to resume.

A checkpoint holds everything a resume needs: weights, optimizer moments, loss scale,
LR schedule, every rank's random-number state, and where training stands.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

import dist_utils
from optim import resume_schedule

GENIE_ANSWERS = Path(__file__).with_name(".genie.yml")  # what genie was asked
# A preempted run leaves this file beside last.pt: the next start resumes.
PREEMPTED = "PREEMPTED"
LARGE = ("model", "optimizer")  # sent as tensors, never pickled whole
log = logging.getLogger("train")


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
    """End the run with one line (rank 0 says it), no traceback."""
    if dist.get_rank() == 0:  # one line, written now: torchrun stops rank 0 as soon as
        print(message, file=sys.stderr, flush=True)  # another rank has exited
    raise SystemExit(1)


def training_state(
    model, optimizer, scaler, scheduler, position: Position, args
) -> dict:
    """What a checkpoint holds, with how the run was made (its arguments and genie's
    answers); every rank calls it (it gathers)."""
    model_state, optimizer_state = model.state_dict(), optimizer.state_dict()
    return {
        "model": model_state,
        "optimizer": optimizer_state,
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": dist_utils.all_rng_states(),
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
    """Load the newest checkpoint any rank can read at ``path`` (a collective);
    None when no rank has one.

    Only global rank 0 writes checkpoints, and the node that runs rank 0 can change
    from run to run (c10d numbers the nodes as they arrive): without a shared
    filesystem the newest checkpoint may be on any node. The ranks agree which rank
    holds it.
    Where every rank sees it, each reads it; else its holder sends it, one tensor at
    a time (no rank unpickles a copy it does not keep).
    """
    steps: list = [None] * dist.get_world_size()
    dist.all_gather_object(steps, _step(path))
    newest = max(steps)
    if newest < 0:
        return None
    holder, shared = steps.index(newest), all(s == newest for s in steps)
    if dist.get_rank() == 0:
        how = (
            "read by every rank"
            if shared
            else f"sent by rank {holder}, the only one with it"
        )
        log.info("resuming from step %d of %s: %s", newest, path, how)
    # memory-mapped: the tensors are read from the file as they are copied, and the
    # optimizer's moments stay file pages until the first step writes them
    state = load_state(path, mmap=True) if shared or dist.get_rank() == holder else None
    header = [None if state is None else {k: state[k] for k in state if k not in LARGE}]
    if state is not None:
        header[0]["misfit"] = misfit(
            shapes(model.state_dict()), shapes(state.get("model"))
        )
    dist.broadcast_object_list(header, src=holder)  # position, scaler, scheduler, RNG
    stop_if_misfit(path, header[0]["misfit"])
    if shared:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    else:
        receive(model, optimizer, state, holder)
    state = header[0]
    scaler.load_state_dict(state["scaler"])
    resume_schedule(scheduler, state["scheduler"], state["step"], change)
    # Each rank's random-number state, unless the world size changed (then fresh seeds).
    if len(state["rng"]) == dist.get_world_size():
        dist_utils.set_rng_state(state["rng"][dist.get_rank()])
    return Position(
        state["epoch"], state["step"], state["best"], state.get("batches", 0)
    )


def _step(path: Path) -> int:
    """The optimizer step ``path`` was written at; -1 when this rank has no file."""
    if not path.exists():
        return -1
    return int(load_state(path, mmap=True)["step"])  # mmap: the tensors are not read


class TensorSpec(NamedTuple):
    """A tensor's place in a state being sent: what to allocate to receive it."""

    shape: tuple
    dtype: torch.dtype
    device: str


def receive(model, optimizer, state: dict | None, src: int) -> None:
    """Copy ``state`` (held by rank ``src`` alone) into every rank's model and
    optimizer, one tensor at a time: the model's tensors are the same on every rank;
    the optimizer's exist only once it has stepped, so their layout travels first."""
    sending = dist.get_rank() == src
    device = dist_utils.collective_device()
    for name, tensor in model.state_dict().items():
        buffer = (
            state["model"][name].to(device)
            if sending
            else torch.empty_like(tensor, device=device)
        )
        dist.broadcast(buffer, src)
        tensor.copy_(buffer)
    layout = [_layout(state["optimizer"]) if sending else None]
    dist.broadcast_object_list(layout, src=src)
    optimizer.load_state_dict(
        _filled(layout[0], state["optimizer"] if sending else None, src)
    )


def _layout(value):
    """``value`` with each tensor replaced by its TensorSpec."""
    if isinstance(value, torch.Tensor):
        return TensorSpec(tuple(value.shape), value.dtype, value.device.type)
    if isinstance(value, dict):
        return {k: _layout(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_layout(v) for v in value)
    return value


def _filled(layout, source, src: int):
    """``layout`` with each TensorSpec replaced by the tensor rank ``src`` sends (from
    ``source`` there), in the same order on every rank."""
    if isinstance(layout, TensorSpec):
        device = dist_utils.collective_device()
        if source is not None:
            buffer = source.to(device)
        else:
            buffer = torch.empty(layout.shape, dtype=layout.dtype, device=device)
        dist.broadcast(buffer, src)
        return buffer.to(layout.device)
    if isinstance(layout, dict):
        return {
            k: _filled(v, source[k] if source is not None else None, src)
            for k, v in layout.items()
        }
    if isinstance(layout, (list, tuple)):
        parts = source if source is not None else [None] * len(layout)
        return type(layout)(
            _filled(layout[i], parts[i], src) for i in range(len(layout))
        )
    return layout
