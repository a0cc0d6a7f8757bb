"""torch.distributed helpers: joining the process group, seeding, and the decisions
that every rank must take together."""

from __future__ import annotations

import datetime
import functools
import gc
import logging
import math
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.utils.data import DataLoader, DistributedSampler


def setup(timeout_minutes: float) -> torch.device:
    """Join the process group torchrun prepared and pick this process's device."""
    if "LOCAL_RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        env_from_slurm()  # srun started one task per device (launch/slurm.sbatch)
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


class ResumableSampler(DistributedSampler):
    """A DistributedSampler whose next epoch can leave out the samples already
    trained: the order is fixed by the seed and the epoch, so they are skipped
    without being read."""

    skip = 0  # samples of the next epoch to leave out

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        skip, self.skip = self.skip, 0
        return iter(indices[skip:])


class ResumableLoader(DataLoader):
    """Lightning's own mid-epoch resume: it writes a loader's state_dict() into its
    checkpoints and gives it back to load_state_dict() before the epoch goes on."""

    trained = 0  # batches of this epoch handed to training

    def __init__(self, *args, sampler: ResumableSampler, **kwargs) -> None:
        # A generator of its own, one per rank: each epoch's iterator draws its
        # workers' seed from it, not from the global RNG the checkpoints restore (a
        # resumed epoch starts no iterator where the uninterrupted one did).
        generator = torch.Generator().manual_seed(sampler.seed + sampler.rank)
        super().__init__(*args, sampler=sampler, generator=generator, **kwargs)

    def __iter__(self) -> Iterator:
        self.trained = self.sampler.skip // self.batch_size
        for batch in super().__iter__():
            self.trained += 1
            yield batch

    def state_dict(self) -> dict:
        # at an epoch's end, the next epoch starts at its first batch
        return {"batches": self.trained % len(self)}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.skip = state["batches"] * self.batch_size


def optimizer_steps(module: torch.nn.Module) -> int:
    """The optimizer steps of the whole run of ``module`` (the LightningModule),
    counted as Lightning's estimated_stepping_batches counts them. That property
    sets the training loader up early, before a resume restores the loader's
    position, which it then never gets: the epoch would start over."""
    args = module.args
    samples = len(module.trainer.datamodule.train_set)
    per_rank = math.ceil(samples / dist.get_world_size())
    total = math.ceil(per_rank // args.batch_size / args.grad_accum) * max(
        args.epochs, 1
    )
    return min(total, args.max_steps) if args.max_steps is not None else total


def eval_loader(dataset, batch_size: int, workers: int, collate_fn) -> DataLoader:
    """In order, sharded by a DistributedSampler that pads the last batch
    (validation_step leaves the padding out); with a generator of its own, so that
    validating draws nothing from the global RNG."""
    sampler = DistributedSampler(dataset, shuffle=False)
    generator = torch.Generator()
    return DataLoader(dataset, batch_size, sampler=sampler, num_workers=workers,
                      collate_fn=collate_fn, generator=generator)  # fmt: skip


def env_from_slurm() -> None:
    """Under srun, set what torchrun would have set, from Lightning's reading of SLURM's
    variables (the first node of the allocation hosts the rendezvous)."""
    slurm = SLURMEnvironment()
    os.environ.update(
        MASTER_ADDR=slurm.main_address,
        MASTER_PORT=str(slurm.main_port),
        RANK=str(slurm.global_rank()),
        LOCAL_RANK=str(slurm.local_rank()),
        WORLD_SIZE=str(slurm.world_size()),
    )


class Preemption(Callback):
    """SIGTERM (Kubernetes, torchrun passing its own on) or SIGUSR1: the ranks agree
    (StopVote) to stop at one optimizer step, soon after the first signal; there they
    write ``folder``/last.ckpt, leave PREEMPTED_FILE and exit PREEMPTED; the next
    start resumes there. Under SLURM, Lightning's own auto-requeue answers instead."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.received, self.step = folder, [], -1
        self.vote = StopVote()

    def on_train_start(self, trainer, module) -> None:
        slurm = trainer.strategy.cluster_environment
        if isinstance(slurm, SLURMEnvironment) and slurm.auto_requeue:
            return
        # Set over Lightning's own handlers, which stop without a checkpoint
        for number in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(number, lambda received, _: self.received.append(received))

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:  # a micro-batch of an accumulation
            return
        self.step = trainer.global_step
        if not self.vote(bool(self.received)):
            return
        last = self.folder / "last.ckpt"
        trainer.save_checkpoint(last)  # every rank: rank 0 writes
        why = stop_reason(self.received)
        exit_preempted(why, self.step, last, leave_file=trainer.is_global_zero)


def resume_point(folder: Path, required: bool) -> Path | None:
    """``folder``/last.ckpt when this start resumes (resumes()), else None. A requeued
    SLURM job is not counted: Lightning resumes its own hpc checkpoint then."""
    if not resumes(folder, required, ("TORCHELASTIC_RESTART_COUNT",)):
        return None
    last = folder / "last.ckpt"
    return shared_checkpoint(last if last.exists() else None, required)


def topology() -> tuple[int, int]:
    """(processes per node, nodes) as launched, which Lightning must be told.

    Under torchrun, devices must equal the processes of this node and num_nodes the node
    count, or Lightning stops ("the product (1 * 1) does not match the world size (2)").
    """
    if "LOCAL_WORLD_SIZE" in os.environ:  # torchrun
        devices = int(os.environ["LOCAL_WORLD_SIZE"])
        return devices, int(os.environ["WORLD_SIZE"]) // devices
    if "SLURM_NTASKS_PER_NODE" in os.environ:  # srun, one task per device; e.g. "4(x2)"
        devices = int(os.environ["SLURM_NTASKS_PER_NODE"].split("(")[0])
        return devices, int(os.environ["SLURM_NNODES"])
    return 1, 1


def shared_checkpoint(found: Path | None, required: bool) -> Path | None:
    """Rank 0's checkpoint to resume from, when every rank can read it.

    Lightning reads the checkpoint on every rank, so it must be on a filesystem
    all nodes share; the ranks agree on that instead of each trusting its own disk.
    """
    chosen = [str(found) if found is not None else None]
    dist.broadcast_object_list(chosen, src=0)
    if chosen[0] is None:
        if required:
            raise SystemExit("--resume: no checkpoint to resume from")
        return None
    path = Path(chosen[0])
    if not every_rank(path.exists()):
        raise SystemExit(
            f"{path} exists on rank 0 but not on every node: put --checkpoint-dir on a "
            "filesystem all nodes share to resume"
        )
    if dist.get_rank() == 0:
        logging.getLogger("train").info("resuming from %s", path)
    return path


PREEMPTED_FILE = "PREEMPTED"  # a preempted run leaves it in --checkpoint-dir


def resumes(folder: Path, required: bool, counts: tuple[str, ...]) -> bool:
    """Whether this start resumes from ``folder``: after --resume (``required``), a
    restart one of the environment variables ``counts`` counts, or a preemption (it left
    PREEMPTED_FILE). torchrun counts restarts per node: the ranks agree."""
    restarted = any(int(os.environ.get(name, "0")) > 0 for name in counts)
    preempted = folder / PREEMPTED_FILE
    if not any_rank(required or restarted or preempted.exists()):
        return False
    preempted.unlink(missing_ok=True)  # every rank has looked: this start resumes
    return True


PREEMPTED = 75  # EX_TEMPFAIL: stopped early on purpose; run it again to go on


def exit_preempted(why: str, step: int, checkpoint: Path, leave_file: bool) -> None:
    """End a preempted run once every rank has helped write ``checkpoint`` (``step``):
    leave PREEMPTED_FILE beside it where ``leave_file`` (the next start resumes), wait
    until all is written, say ``why`` on rank 0 and exit PREEMPTED."""
    if leave_file:
        (checkpoint.parent / PREEMPTED_FILE).touch()
    barrier()  # all written before any process exits
    if dist.get_rank() == 0:
        logging.getLogger("train").info(
            "%s: stopped at step %d, checkpoint written to %s; exiting %d (a new start "
            "resumes there)",
            why, step, checkpoint, PREEMPTED,
        )  # fmt: skip
    raise SystemExit(PREEMPTED)


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
