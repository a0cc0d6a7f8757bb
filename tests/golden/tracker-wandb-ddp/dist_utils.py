"""torch.distributed helpers: joining the process group, seeding, and the decisions
that every rank must take together."""

from __future__ import annotations

import datetime
import functools
import gc
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)


def setup(timeout_minutes: float) -> torch.device:
    """Join the process group torchrun prepared and pick this process's device."""
    if "LOCAL_RANK" not in os.environ:
        raise SystemExit(
            "train.py runs under torchrun: use launch/single_node.sh (see README.md)"
        )
    # LOCAL_RANK numbers the processes of this node, so it indexes this node's GPUs.
    # RANK is global: on every node but the first it would point past the last GPU.
    local_rank = int(os.environ["LOCAL_RANK"])
    # A rank stuck in a collective (a peer died, a node is unreachable) raises after
    # this long, naming the collective, instead of hanging the whole job.
    timeout = datetime.timedelta(minutes=timeout_minutes)
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO if dist.get_rank() == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {dist.get_rank()}] %(message)s",
    )
    return device


def seed_all(seed: int) -> None:
    """Seed Python and torch (every device). Call it with the same seed on every rank
    before building the model (same initial weights), then with seed + rank, so that
    dropout and augmentation differ across ranks as they should."""
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def all_rng_states() -> list[dict]:
    """Every rank's random-number state, gathered (a collective: all ranks call it)."""
    states: list = [None] * dist.get_world_size()
    dist.all_gather_object(states, rng_state())
    return states


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def prepare_once(prepare: Callable[[], None], directory: Path) -> None:
    """Run ``prepare`` (downloads, caches: into ``directory``) before the other ranks
    read its result: once per job where every node sees the same ``directory`` (a
    shared filesystem: global rank 0 prepares), else once per node (local rank 0), so
    that no two nodes write the same files at once (pytorch-lightning issue 17732) and
    a node without a shared disk still gets its own copy. Where it fails, every
    rank stops together: the preparing process says why (data.prepare says it in one
    line), the others exit quietly instead of losing their peer in a barrier."""
    shared = shared_dir(directory)
    if dist.get_rank() == 0:
        how = (
            "shared by all nodes: rank 0"
            if shared
            else "per node: each node's first process"
        )
        logging.getLogger("train").info("data: %s/ is %s prepares it", directory, how)
    first = (
        dist.get_rank() == 0 if shared else int(os.environ.get("LOCAL_RANK", "0")) == 0
    )
    failure: BaseException | None = None
    if first:
        try:
            prepare()
        except (Exception, SystemExit) as err:
            failure = err
    if any_rank(failure is not None):  # the others wait here
        raise failure if failure is not None else SystemExit(1)


def shared_dir(directory: Path) -> bool:
    """Whether every rank sees the same ``directory``: rank 0 leaves a file of a new
    name in it (no client has cached its absence) and every rank looks for it."""
    name = [f".genie-probe-{os.getpid()}-{random.SystemRandom().getrandbits(64):x}"]
    dist.broadcast_object_list(name, src=0)
    probe = directory / name[0]
    if dist.get_rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
        probe.touch()
    barrier()  # the probe exists
    shared = every_rank(probe.exists())  # every rank has looked
    if dist.get_rank() == 0:
        probe.unlink()
    return shared


def barrier() -> None:
    """Wait for every rank."""
    dist.barrier()


def collective_device() -> torch.device:
    """Where a tensor must be for this process group's collectives: NCCL reduces only
    CUDA tensors (the frameworks move the model back to the CPU when training ends)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def every_rank(flag: bool) -> bool:
    """True when ``flag`` holds on every rank: one decision for all of them."""
    value = torch.tensor(int(flag), device=collective_device())
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def any_rank(flag: bool) -> bool:
    """True when ``flag`` holds on some rank: one decision for all of them."""
    return not every_rank(not flag)


# Seconds between the ranks' stop votes (StopVote); 0: a vote after every optimizer step
STOP_VOTE_SECONDS = float(os.environ.get("GENIE_STOP_VOTE_SECONDS", "0.5"))


class StopVote:
    """Whether any rank was asked to stop, agreed by all ranks at the same optimizer
    step without holding steps up; call it after every optimizer step. A vote is one
    all-reduce, started at one call and read at the next, long finished by then (with
    NCCL a copy queued behind it on the stream brings it to the host: this process
    never waits for the GPU's current step). Each vote also agrees on the steps until
    the next, from the slowest rank's pace, so that votes come about every
    STOP_VOTE_SECONDS (at least every 100 steps): the ranks stop together within about
    that time of the first signal, for one small collective per interval."""

    def __init__(self) -> None:
        self.calls, self.due, self.since = 0, 1, (0, time.monotonic())
        self.pending: Callable[[], list[int]] | None = None

    def __call__(self, flag: bool) -> bool:
        self.calls += 1
        if self.pending is not None:  # the vote started at the previous call
            stop, fewest_steps = self.pending()
            self.pending = None
            if stop:
                return True
            self.due = self.calls - fewest_steps - 1  # max() of minus steps: the fewest
        if self.calls == self.due:
            calls, then = self.since
            self.since = (self.calls, time.monotonic())
            pace = (self.calls - calls) / max(self.since[1] - then, 1e-6)  # steps per s
            steps = max(1, min(100, int(STOP_VOTE_SECONDS * pace)))
            self.pending = self.start([int(flag), -steps])
        return False

    @staticmethod
    def start(values: list[int]) -> Callable[[], list[int]]:
        """All-reduce (max) ``values`` without waiting; returns their reader."""
        vote = torch.tensor(values, device=collective_device())
        work = dist.all_reduce(vote, op=dist.ReduceOp.MAX, async_op=True)
        if vote.is_cuda:
            work.wait()  # the stream waits for NCCL, not this process
            host = torch.empty(len(values), dtype=vote.dtype, pin_memory=True)
            host.copy_(vote, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            done: Callable[[], object] = copied.synchronize
        else:
            host, done = vote, work.wait

        def result() -> list[int]:
            done()
            return host.tolist()

        return result


def stop_reason(received: list[int]) -> str:
    """Why the ranks agreed to stop, as this rank knows it."""
    return signal.Signals(received[0]).name if received else "another rank's signal"


def mean_across_ranks(value: torch.Tensor) -> float:
    """Average a scalar over all ranks (gloo has no ReduceOp.AVG, so sum and divide)."""
    total = value.detach().to(
        device=collective_device(), dtype=torch.float32, copy=True
    )
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / dist.get_world_size()


def checkpoint_activations(
    model: torch.nn.Module, blocks: list[torch.nn.Module]
) -> None:
    """Activation checkpointing: each of ``blocks`` keeps only its input in forward and
    recomputes its activations in backward. Non-reentrant, so it works under DDP, FSDP
    and torch.compile; the model's state-dict keys do not change."""
    chosen = set(blocks)
    wrapper = functools.partial(
        checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT
    )
    apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=wrapper, check_fn=lambda m: m in chosen
    )


def shutdown() -> None:
    """Tear the process group down once everything that used it is gone, then let the
    process exit quickly.

    Collect the model, optimizer and collective results first: otherwise gloo can abort
    at exit while a worker thread frees the last collective's tensors
    (pytorch/pytorch#190489).
    """
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    # What is left lives until exit: frozen, it spares the interpreter's exit a garbage
    # collection over every object of the thousands of modules torch loads.
    gc.freeze()
