"""Train proj with PyTorch Fully Sharded Data Parallel (FSDP2, fully_shard).

One process per device, started by torchrun (see launch/ and README.md):

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.pt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

import checkpoint
import data
import dist_utils
import fsdp
from config import parse_args
from evaluation import evaluate, split_dataset
from model import build_model
from optim import build_optimizer, lr_schedule, make_scaler
from tracking import Monitor, Tracker

log = logging.getLogger("train")

# torchrun numbers the processes; global rank 0 logs, shows progress and checkpoints.
MAIN_PROCESS = int(os.environ.get("RANK", "0")) == 0


# SLURM warns a job before its time is up (#SBATCH --signal), Kubernetes and torchrun
# send SIGTERM: the run checkpoints at a step boundary and exits PREEMPTED.
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
STOP_REQUESTS: list[int] = []  # the stop signals this process has received
# the ranks' agreement on them, about every half second
STOP_VOTE = dist_utils.StopVote()
PREEMPTED = 75  # EX_TEMPFAIL: stopped early on purpose; run it again to go on


def resuming(args: argparse.Namespace) -> bool:
    """Whether this start continues a run: --resume or --eval-only, a torchrun restart
    (--max_restarts), a requeued SLURM job, or a start after a preemption (the
    checkpoint.PREEMPTED file it left)."""
    counts = ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
    restarted = any(int(os.environ.get(name, "0")) > 0 for name in counts)
    preempted = (args.checkpoint_dir / checkpoint.PREEMPTED).exists()
    # torchrun counts restarts per node, and a node may not see the PREEMPTED file:
    # the ranks agree (not each by what it sees).
    return dist_utils.any_rank(args.resume or args.eval_only or restarted or preempted)


def catch_stop_signals() -> None:
    for number in STOP_SIGNALS:
        signal.signal(number, lambda received, frame: STOP_REQUESTS.append(received))


@dataclass
class Run:
    """What the training loop works with, built once by build_run()."""

    args: argparse.Namespace
    device: torch.device
    model: nn.Module  # the plain model: checkpoints and evaluation read it
    forward: nn.Module  # what trains: the FSDP wrapper, compiled with --compile
    optimizer: torch.optim.Optimizer
    scaler: object  # a GradScaler, active for fp16 only
    scheduler: torch.optim.lr_scheduler.LambdaLR
    monitor: Monitor
    position: checkpoint.Position
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    # The first and latest step loss and the last epoch's mean, for --smoke.
    first_loss: torch.Tensor | None = None
    last_loss: torch.Tensor | None = None
    epoch_loss: float | None = None
    best_epoch: int | None = None  # this run's epoch (0-based) with the best validation

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.args.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.args.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def optimizer_step(self) -> None:
        if self.args.max_grad_norm > 0:  # 0 turns clipping off, as in Lightning and HF
            # Clip the true gradients, not scaled ones.
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.position.step += 1


def train_epoch(run: Run, loader: DataLoader) -> tuple[torch.Tensor, int]:
    """One pass over ``loader`` with gradient accumulation; returns the summed
    micro-batch loss and the micro-batch count (for the epoch mean)."""
    # A bar only where someone watches it: rank 0 on a terminal (not pipes or logs).
    watched = MAIN_PROCESS and sys.stderr.isatty()
    bar = tqdm(total=len(loader), disable=not watched, leave=False, dynamic_ncols=True)
    with logging_redirect_tqdm():  # log lines go above the bar, never glued onto it
        epoch_loss, batches = _micro_steps(run, loader, bar)
    bar.close()
    return epoch_loss, batches


def _micro_steps(run: Run, loader: DataLoader, bar: tqdm) -> tuple[torch.Tensor, int]:
    args, device = run.args, run.device
    epoch_loss, batches = torch.zeros((), device=device), 0
    micro_losses: list[torch.Tensor] = []  # the current optimizer step's
    for i, batch in enumerate(loader):  # a resumed epoch: the batches it has left
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        # Micro-batches in this optimizer step: --grad-accum, or what the epoch has left
        group = min(
            args.grad_accum, len(loader) - i // args.grad_accum * args.grad_accum
        )
        last_micro_step = len(micro_losses) + 1 == group
        # no_sync skips the gradient all-reduce on all but the last micro-step;
        # gradients accumulate locally and are averaged once, before the step.
        with contextlib.nullcontext() if last_micro_step else run.no_sync():
            with run.autocast():
                loss = nn.functional.cross_entropy(run.forward(**batch), labels)
            # Scaled so that the step applies the mean gradient of its micro-batches.
            run.scaler.scale(loss / group if group > 1 else loss).backward()
        micro_losses.append(loss.detach())
        batches += 1
        bar.update()
        if not last_micro_step:
            continue
        run.optimizer_step()
        run.position.batches += group
        step_sum = micro_losses[0] if group == 1 else torch.stack(micro_losses).sum()
        epoch_loss += step_sum
        run.last_loss = step_sum / group
        run.first_loss = run.last_loss if run.first_loss is None else run.first_loss
        micro_losses = []
        run.monitor.after_step(
            run.position.step, run.last_loss, run.scheduler.get_last_lr()[0]
        )
        stop = stop_requested()
        if stop:
            save(run, preempted=True)
            dist_utils.barrier()  # the checkpoint is complete before any rank exits
            log.info(
                "%s: stopped at step %d, checkpoint written to %s; exiting %d "
                "(a new start resumes there)",
                stop, run.position.step, args.checkpoint_dir / "last.pt", PREEMPTED,
            )  # fmt: skip
            raise SystemExit(PREEMPTED)
        if (
            args.save_every
            and run.position.step % args.save_every == 0
            and i + 1 < len(loader)
        ):
            save(run)  # a step checkpoint; the epoch's end writes its own
        if args.max_steps is not None and run.position.step >= args.max_steps:
            break
    return epoch_loss, batches


def stop_requested() -> str | None:
    """The signal that asked this run to stop, once any rank has received one (every
    rank calls this after each optimizer step: all stop at the same one, within about
    half a second of the first signal)."""
    if STOP_VOTE(bool(STOP_REQUESTS)):
        return dist_utils.stop_reason(STOP_REQUESTS)
    return None


def save(
    run: Run, improved: bool = False, epoch_end: bool = False, preempted: bool = False
) -> None:
    """Write last.pt (best.pt when validation improved, epoch-N.pt at an epoch end), at
    any step: the position says which batches of the epoch are done. A preempted run
    also leaves checkpoint.PREEMPTED, which makes the next start resume."""
    state = checkpoint.training_state(
        run.model, run.optimizer, run.scaler, run.scheduler, run.position, run.args
    )
    if MAIN_PROCESS:
        keep = run.args.keep if epoch_end else 0
        checkpoint.save_checkpoints(run.args.checkpoint_dir, state, improved, keep)
        if preempted:
            (run.args.checkpoint_dir / checkpoint.PREEMPTED).touch()
    del state


def fit(run: Run, loader: DataLoader) -> None:
    """Train from run.position to --epochs (or --max-steps). Each epoch logs its mean
    loss and samples/s, validates, and checkpoints (rank 0 writes)."""
    args = run.args
    for epoch in range(run.position.epoch + 1, args.epochs):
        # Without set_epoch every epoch would replay the same shuffle on every rank.
        # A resumed epoch leaves out the samples it trained before the checkpoint.
        loader.sampler.set_epoch(epoch, skip=run.position.batches * loader.batch_size)
        run.forward.train()
        started = time.perf_counter()
        loss_sum, batches = train_epoch(run, loader)
        samples = batches * run.monitor.global_batch // args.grad_accum  # all processes
        throughput = samples / (time.perf_counter() - started)
        loss = dist_utils.mean_across_ranks(loss_sum / max(batches, 1))
        finished = batches == len(loader)  # else --max-steps stopped it part-way
        done = "done" if finished else f"stopped at step {run.position.step}"
        log.info(
            "epoch %d %s: loss %.4f, %.0f samples/s", epoch, done, loss, throughput
        )
        run.epoch_loss = loss
        accuracy = run.monitor.validate(run.position.step)["accuracy"]
        improved = accuracy > run.position.best  # the same on every rank: all-reduced
        run.position.best = max(accuracy, run.position.best)
        if finished:
            run.position.epoch, run.position.batches = epoch, 0
        if improved:
            run.best_epoch = epoch
        save(run, improved, epoch_end=finished)
        if not finished:
            break


def summary_line(run: Run) -> str:
    """The one line a run ends with: epochs, best validation, where the results are."""
    args = run.args
    if run.best_epoch is not None:
        best = f"best validation accuracy {run.position.best:.4f}"
        best += f" at epoch {run.best_epoch + 1}"
    elif run.position.best >= 0:
        best = f"best validation accuracy {run.position.best:.4f} (an earlier run)"
    else:
        best = "no validation yet"
    line = (
        f"done: {run.position.epoch + 1}/{args.epochs} epochs, {best}; "
        f"checkpoints in {args.checkpoint_dir}/ (last.pt, best.pt)"
    )
    if args.tracker != "none":
        line += f", {args.tracker} logs in {args.log_dir}/"
    return line


def build_loaders(
    args: argparse.Namespace, device: torch.device
) -> tuple[DataLoader, DataLoader]:
    # Once per shared disk: one download for all nodes, or one per node without one.
    dist_utils.prepare_once(lambda: data.prepare(args), data.prepared_dir(args))
    train_set, val_set = split_dataset(args)
    # Each rank reads a disjoint shard of every epoch. drop_last: no short last batch
    # (BatchNorm cannot normalize a batch of one sample).
    loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        sampler=checkpoint.ResumableSampler(train_set, seed=args.seed),
        drop_last=True,
        generator=torch.Generator(),  # not the global RNG: dropout resumes exactly
        collate_fn=train_set.collate_fn,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0,
    )
    # Validation in order, padded to equal batch counts; evaluate() drops the padding.
    val_loader = DataLoader(
        val_set,
        batch_size=args.batch_size,
        sampler=DistributedSampler(val_set, shuffle=False),
        collate_fn=val_set.collate_fn,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
    )
    return loader, val_loader


def build_run(
    args: argparse.Namespace, device: torch.device, loader: DataLoader
) -> Run:
    """Model, optimizer and schedule on this rank, resumed when asked or restarted."""
    dist_utils.seed_all(args.seed)  # the same initial weights on every rank
    num_classes = loader.dataset.num_classes
    # Rank 0 alone builds the whole model; every rank holds only its shard.
    model = fsdp.build_sharded(lambda: build_model(args, num_classes), device, args)
    dist_utils.seed_all(args.seed + dist.get_rank())  # distinct dropout on every rank
    optimizer = build_optimizer(model, args)
    total_steps = math.ceil(len(loader) / args.grad_accum) * args.epochs
    total_steps = min(total_steps, args.max_steps or total_steps)
    global_batch = args.batch_size * dist.get_world_size() * args.grad_accum
    wrapped, no_sync = model, fsdp.no_sync(model)
    run = Run(
        args, device, model,
        forward=torch.compile(wrapped) if args.compile else wrapped,
        optimizer=optimizer, scaler=make_scaler(args.precision),
        scheduler=lr_schedule(optimizer, total_steps, args.warmup_ratio),
        monitor=Monitor(args, Tracker(args, MAIN_PROCESS), global_batch, total_steps),
        position=checkpoint.Position(), no_sync=no_sync,
    )  # fmt: skip
    if resuming(args):
        path = args.checkpoint_dir / "last.pt"
        # --eval-only trains nothing: the schedule is only read
        change = "continue" if args.eval_only else args.schedule_change
        position = checkpoint.resume(
            path, model, optimizer, run.scaler, run.scheduler, change
        )
        if position is None and (args.resume or args.eval_only):
            raise SystemExit(f"--resume: no checkpoint at {path}")
        if position is not None:
            run.position = position
            run.monitor.since_step = position.step
            log.info(
                "resumed from %s at epoch %d, step %d",
                path,
                position.epoch + 1,
                position.step,
            )
        if MAIN_PROCESS:  # resumed: the next start need not
            (args.checkpoint_dir / checkpoint.PREEMPTED).unlink(missing_ok=True)
    return run


def train(args: argparse.Namespace, device: torch.device) -> None:
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs
    loader, val_loader = build_loaders(args, device)
    run = build_run(args, device, loader)
    catch_stop_signals()  # from here on, SIGUSR1 and SIGTERM stop at a step boundary
    if args.smoke:
        import smoke_check

        # GENIE_FAULT, for tests
        smoke_check.arm_fault(run.model, args.checkpoint_dir, run.position.step)
    run.monitor.evaluate = lambda: evaluate(run.model, val_loader, device, run.autocast)
    if args.eval_only:
        log.info("validation: %s", json.dumps(run.monitor.evaluate()))
        return
    world_size = dist.get_world_size()
    log.info(
        "world size %d on %s (%s); global batch %d = %d per rank x %d ranks x %d accum",
        world_size, device.type, dist.get_backend(), run.monitor.global_batch,
        args.batch_size, world_size, args.grad_accum,
    )  # fmt: skip
    started = time.perf_counter()
    fit(run, loader)
    run.monitor.tracker.close()
    log.info(summary_line(run))
    if args.smoke:
        seconds = time.perf_counter() - started
        smoke_check.check_run(run, loader.dataset.num_classes, seconds)


# torchrun then shows the exception a failed rank raised, not only its exit code
@record
def main() -> None:
    args = parse_args()
    device = dist_utils.setup(args.dist_timeout)
    try:
        train(args, device)
    finally:
        dist_utils.shutdown()  # after train() returned: its tensors are garbage now


if __name__ == "__main__":
    main()
