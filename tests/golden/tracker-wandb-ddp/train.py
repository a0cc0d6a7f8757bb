"""Train proj with PyTorch DistributedDataParallel (DDP).

One process per device, started by torchrun (see launch/ and README.md):

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.pt
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, random_split
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

import data
from model import build_model

log = logging.getLogger("train")

SMOKE_MARKER = "GENIE_SMOKE "
# --smoke defaults: small enough to finish in seconds on two CPU processes.
SMOKE_EPOCHS = 2
SMOKE_BATCH_SIZE = 4


class FirstLast:
    """The first and the latest of a stream of losses (all a report needs)."""

    def __init__(self) -> None:
        self.first: torch.Tensor | None = None
        self.last: torch.Tensor | None = None

    def add(self, loss: torch.Tensor) -> None:
        if self.first is None:
            self.first = loss
        self.last = loss


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, help="default: 3 (2 with --smoke)")
    parser.add_argument(
        "--batch-size", type=int, help="per process; default: 32 (4 with --smoke)"
    )
    parser.add_argument(
        "--grad-accum", type=int, default=1, help="micro-batches per optimizer step"
    )
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument(
        "--max-grad-norm",
        type=float,
        default=1.0,
        help="gradient clipping norm (0: off)",
    )
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="fp32")
    parser.add_argument("--compile", action="store_true", default=False)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--num-workers", type=int, default=2, help="DataLoader workers per process"
    )
    parser.add_argument(
        "--log-every", type=int, default=10, help="optimizer steps between logs"
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="share of the data held out for validation",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="steps between validations (0: once per epoch)",
    )
    parser.add_argument(
        "--warmup-ratio",
        type=float,
        default=0.05,
        help="share of steps with linear LR warmup",
    )
    parser.add_argument(
        "--keep",
        type=int,
        default=2,
        help="checkpoints kept (besides the last and the best)",
    )
    parser.add_argument(
        "--tracker",
        choices=("tensorboard", "wandb", "mlflow", "none"),
        default="wandb",
        help="experiment tracker rank 0 logs to",
    )
    parser.add_argument(
        "--log-dir", type=Path, default=Path("runs"), help="TensorBoard logs"
    )
    parser.add_argument(
        "--eval-only",
        action="store_true",
        help="validate the last checkpoint, then stop",
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, help="stop after this many steps"
    )
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"))
    parser.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny model, synthetic data, a few steps, no downloads",
    )
    data.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = SMOKE_EPOCHS if args.smoke else 3
    if args.batch_size is None:
        args.batch_size = SMOKE_BATCH_SIZE if args.smoke else 32
    if args.smoke:
        args.num_workers = 0
    return args


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(precision: str) -> torch.amp.GradScaler:
    # fp16 gradients underflow without loss scaling; bf16 has fp32's range: no scaler.
    return torch.amp.GradScaler("cuda", enabled=precision == "fp16")


def save_checkpoint(path: Path, state: dict) -> None:
    """Write a temp file, then rename it: a crash mid-save keeps the old checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def training_state(model, optimizer, scaler, scheduler, position: dict) -> dict:
    """Everything a resume needs: weights, optimizer moments, loss scale, LR schedule,
    and where training stands (``position``: epoch, step, best validation accuracy)."""
    model_state, optimizer_state = model.state_dict(), optimizer.state_dict()
    return {
        "model": model_state,
        "optimizer": optimizer_state,
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict(),
        **position,
    }


def restore(state: dict, model, optimizer, scaler, scheduler) -> dict:
    """Load a training_state(); returns its position (epoch, step, best)."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    scheduler.load_state_dict(state["scheduler"])
    return {key: state[key] for key in ("epoch", "step", "best")}


def save_checkpoints(directory: Path, state: dict, improved: bool, keep: int) -> None:
    """last.pt always; best.pt when validation improved; the newest --keep epoch-N.pt.

    Each file appears atomically; best.pt and epoch-N.pt are hard links to the file just
    written (no second write), or copies where the filesystem has no hard links.
    """
    last = directory / "last.pt"
    save_checkpoint(last, state)
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
    for old in sorted(directory.glob("epoch-*.pt"))[:-keep] if keep else []:
        old.unlink()


def load_state(path: Path) -> dict:
    """Read a checkpoint this project wrote, onto the CPU."""
    return torch.load(
        path, map_location="cpu", weights_only=True
    )  # tensors and plain data


def checkpoint_loads(
    directory: Path, args, num_classes: int, parameters: list[torch.Tensor]
) -> bool:
    """True when last.pt and best.pt load strictly into a freshly built, unwrapped model
    and last.pt holds exactly ``parameters`` (the weights training ended with)."""
    fresh = build_model(args, num_classes)
    fresh.load_state_dict(load_state(directory / "best.pt")["model"])
    fresh.load_state_dict(load_state(directory / "last.pt")["model"])
    return holds_exactly(fresh, parameters)


def collective_device() -> torch.device:
    """Where a tensor must be for this process group's collectives: NCCL reduces only
    CUDA tensors (the frameworks move the model back to the CPU when training ends)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def mean_across_ranks(value: torch.Tensor) -> float:
    """Average a scalar over all ranks (gloo has no ReduceOp.AVG, so sum and divide)."""
    total = value.detach().to(
        device=collective_device(), dtype=torch.float32, copy=True
    )
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / dist.get_world_size()


def params_in_sync(parameters: list[torch.Tensor]) -> bool:
    """True when all ranks hold identical parameters (elementwise max == min)."""
    device = collective_device()
    flat = torch.cat(
        [
            p.detach().to(device=device, dtype=torch.float32).reshape(-1)
            for p in parameters
        ]
    )
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return bool(torch.equal(high, low))


def smoke_report(losses: FirstLast, parameters: list[torch.Tensor], **facts) -> dict:
    """The GENIE_SMOKE facts; every rank must call it (it runs collectives)."""
    return {
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        **facts,
        "first_loss": (
            mean_across_ranks(losses.first) if losses.first is not None else None
        ),
        "last_loss": (
            mean_across_ranks(losses.last) if losses.last is not None else None
        ),
        "params_in_sync": params_in_sync(parameters),
    }


def shutdown() -> None:
    """Tear the process group down once everything that used it is gone.

    Collect the model, optimizer and collective results first: otherwise gloo can abort
    at exit while a worker thread frees the last collective's tensors
    (pytorch/pytorch#190489).
    """
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def train_epoch(
    args: argparse.Namespace,
    forward: torch.nn.Module,
    model: torch.nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    scaler,
    scheduler,
    device: torch.device,
    no_sync,
    step: int,
    losses: FirstLast,
    after_step=None,
    progress: bool = False,
) -> tuple[int, torch.Tensor, int]:
    """One pass over ``loader`` with gradient accumulation.

    Adds each optimizer step's loss (the mean over its micro-batches) to ``losses`` and
    calls ``after_step(step, loss)`` after the step. Returns the step count after the
    pass, and the summed micro-batch loss and micro-batch count (for the epoch mean).
    """
    epoch_loss, batches = torch.zeros((), device=device), 0
    micro_losses: list[torch.Tensor] = []  # the current optimizer step's
    accum, batches_in_epoch = args.grad_accum, len(loader)
    bar = tqdm(
        total=batches_in_epoch, disable=not progress, leave=False, dynamic_ncols=True
    )
    for i, batch in enumerate(loader):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        # Micro-batches in this optimizer step: --grad-accum, or what the epoch has left
        group = min(accum, batches_in_epoch - i // accum * accum)
        last_micro_step = len(micro_losses) + 1 == group
        # no_sync skips the gradient all-reduce on all but the last micro-step;
        # gradients accumulate locally and are averaged once, before the step.
        with contextlib.nullcontext() if last_micro_step else no_sync():
            with autocast(device, args.precision):
                loss = nn.functional.cross_entropy(forward(**batch), labels)
            # Scaled so that the step applies the mean gradient of its micro-batches.
            scaler.scale(loss / group if group > 1 else loss).backward()
        micro_losses.append(loss.detach())
        batches += 1
        bar.update()
        if not last_micro_step:
            continue

        if args.max_grad_norm > 0:  # 0 turns clipping off, as in Lightning and HF
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        # Bookkeeping in as few tensor operations as possible: each costs a kernel
        # launch, and nothing here waits for the device.
        if len(micro_losses) == 1:
            step_loss = micro_losses[0]
            epoch_loss += step_loss
        else:
            step_sum = torch.stack(micro_losses).sum()
            step_loss = step_sum / len(micro_losses)
            epoch_loss += step_sum
        micro_losses = []
        losses.add(step_loss)
        if after_step is not None:
            after_step(step, step_loss)
        if args.max_steps is not None and step >= args.max_steps:
            break
    bar.close()
    return step, epoch_loss, batches


def fit(
    args: argparse.Namespace,
    forward: torch.nn.Module,
    model: torch.nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    scaler,
    scheduler,
    device: torch.device,
    no_sync,
    monitor,
    position: dict,
    epoch_mean,
    main_process: bool = True,
) -> tuple[int, FirstLast]:
    """Train from ``position`` to --epochs (or --max-steps).

    Each epoch logs its mean loss (``epoch_mean`` reduces it) and samples/s, validates,
    and checkpoints: every process builds the training state (with FSDP, gathering the
    shards), the main one writes it. Returns the step reached and the step losses.
    """
    losses = FirstLast()
    step = position["step"]
    for epoch in range(position["epoch"] + 1, args.epochs):
        if hasattr(loader.sampler, "set_epoch"):  # DistributedSampler
            # Without set_epoch every epoch would replay the same shuffle on every rank.
            loader.sampler.set_epoch(epoch)
        forward.train()
        started = time.perf_counter()
        step, loss_sum, batches = train_epoch(
            args, forward, model, loader, optimizer, scaler, scheduler, device, no_sync,
            step, losses, monitor.after_step, progress=main_process,
        )  # fmt: skip
        samples = (
            batches * monitor.global_batch // args.grad_accum
        )  # over all processes
        throughput = samples / (time.perf_counter() - started)
        loss = epoch_mean(loss_sum / max(batches, 1))
        log.info("epoch %d done: loss %.4f, %.0f samples/s", epoch, loss, throughput)
        metrics = monitor.validate(step)
        improved = metrics["accuracy"] > position["best"]
        position = {
            "epoch": epoch,
            "step": step,
            "best": max(metrics["accuracy"], position["best"]),
        }
        state = training_state(model, optimizer, scaler, scheduler, position)
        if main_process:
            save_checkpoints(args.checkpoint_dir, state, improved, args.keep)
        del state
        if args.max_steps is not None and step >= args.max_steps:
            break
    return step, losses


def split_dataset(
    dataset: Dataset, args: argparse.Namespace
) -> tuple[Dataset, Dataset]:
    """Hold out --val-fraction of the data for validation, the same split on every rank.

    Have a separate validation set? Return it here instead.
    """
    val_size = max(1, round(len(dataset) * args.val_fraction))
    generator = torch.Generator().manual_seed(args.seed)
    train_set, val_set = random_split(
        dataset, [len(dataset) - val_size, val_size], generator=generator
    )
    return train_set, val_set


def real_samples(
    rank: int, world_size: int, total: int, start: int, count: int
) -> torch.Tensor:
    """Which samples of a validation batch are real, not DistributedSampler padding.

    With shuffle=False the sampler pads the dataset with its first samples so that
    every rank gets as many batches; local position j on rank r is global position
    r + j * world_size, a repeat when past the end. Counted, repeats would count twice.
    """
    positions = rank + (start + torch.arange(count)) * world_size
    return positions < total


def lr_schedule(optimizer, total_steps: int, warmup_ratio: float):
    """Linear warmup over the first warmup_ratio of the steps, then cosine decay."""
    warmup = max(1, round(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def holds_exactly(model: nn.Module, parameters: list[torch.Tensor]) -> bool:
    """True when ``model``'s parameters equal ``parameters``, one for one."""
    saved = list(model.parameters())
    return len(saved) == len(parameters) and all(
        torch.equal(saved[i], parameters[i].detach().cpu()) for i in range(len(saved))
    )


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: DataLoader, device: torch.device, args: argparse.Namespace
) -> dict[str, float]:
    """Loss and accuracy over the whole validation set, exact across ranks: sums and
    counts are all-reduced (not per-rank means averaged) and padding is left out."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model.eval()
    totals = torch.zeros(
        3, dtype=torch.float64, device=device
    )  # loss sum, correct, count
    seen = 0
    for batch in loader:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        with autocast(device, args.precision):
            logits = model(**batch)
        real = real_samples(rank, world_size, len(loader.dataset), seen, len(labels))
        real = real.to(device)
        seen += len(labels)
        loss = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        correct = logits.argmax(dim=-1) == labels
        totals += torch.stack(
            [loss[real].sum(), correct[real].sum(), real.sum()]
        ).double()
    dist.all_reduce(totals)
    model.train()
    loss_sum, correct_sum, count = totals.tolist()
    return {
        "loss": loss_sum / count,
        "accuracy": correct_sum / count,
        "count": int(count),
    }


class Monitor:
    """Logs every --log-every steps (rank 0's loss, LR, samples/s, ETA) and validates
    every --eval-every steps and at each epoch end, to the log and the tracker."""

    def __init__(
        self,
        args,
        tracker,
        scheduler,
        global_batch: int,
        total_steps: int,
        step: int,
        evaluate,
    ) -> None:
        self.args, self.tracker, self.scheduler = args, tracker, scheduler
        self.global_batch, self.total_steps, self.evaluate = (
            global_batch,
            total_steps,
            evaluate,
        )
        self.since, self.since_step = time.perf_counter(), step
        self.metrics: dict[str, float] = {}

    def after_step(self, step: int, loss: torch.Tensor) -> None:
        if step % self.args.log_every == 0:
            now = time.perf_counter()
            rate = (step - self.since_step) * self.global_batch / (now - self.since)
            eta = datetime.timedelta(
                seconds=round(
                    (self.total_steps - step) * self.global_batch / max(rate, 1e-9)
                )
            )
            lr = self.scheduler.get_last_lr()[0]
            value = loss.item()  # this rank's; the epoch mean is averaged over ranks
            log.info(
                "step %d/%d loss %.4f lr %.2e %.0f samples/s ETA %s",
                step, self.total_steps, value, lr, rate, eta,
            )  # fmt: skip
            self.tracker.log(
                {"train/loss": value, "train/lr": lr, "train/samples_per_s": rate}, step
            )
            self.since, self.since_step = now, step
        if self.args.eval_every and step % self.args.eval_every == 0:
            self.validate(step)

    def validate(self, step: int) -> dict[str, float]:
        self.metrics = self.evaluate()
        loss, accuracy = self.metrics["loss"], self.metrics["accuracy"]
        log.info("step %d validation: loss %.4f, accuracy %.4f", step, loss, accuracy)
        self.tracker.log({"val/loss": loss, "val/accuracy": accuracy}, step)
        return self.metrics


class Tracker:
    """Experiment tracking from global rank 0 only (the other ranks get a no-op)."""

    def __init__(self, args: argparse.Namespace, enabled: bool) -> None:
        self.kind = args.tracker if enabled else "none"
        try:
            if self.kind == "tensorboard":
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(log_dir=str(args.log_dir))
            elif self.kind == "wandb":
                import wandb

                self.run = wandb.init(project="proj", config=vars(args))
            elif self.kind == "mlflow":
                import mlflow

                mlflow.set_experiment("proj")
                mlflow.start_run()
                mlflow.log_params({k: str(v) for k, v in vars(args).items()})
        except ImportError as err:
            raise SystemExit(
                f"--tracker {self.kind}: {err.name} is not installed; "
                f"pip install {err.name}, or pass --tracker none"
            ) from None

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.kind == "tensorboard":
            for name, value in metrics.items():
                self.writer.add_scalar(name, value, step)
        elif self.kind == "wandb":
            self.run.log(metrics, step=step)
        elif self.kind == "mlflow":
            import mlflow

            mlflow.log_metrics(metrics, step=step)

    def close(self) -> None:
        if self.kind == "tensorboard":
            self.writer.close()
        elif self.kind == "wandb":
            self.run.finish()
        elif self.kind == "mlflow":
            import mlflow

            mlflow.end_run()


def setup_distributed() -> torch.device:
    """Join the process group torchrun prepared and pick this process's device."""
    if "LOCAL_RANK" not in os.environ:
        raise SystemExit(
            "train.py runs under torchrun: use launch/single_node.sh (see README.md)"
        )
    # LOCAL_RANK numbers the processes of this node, so it indexes this node's GPUs.
    # RANK is global: on every node but the first it would point past the last GPU.
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO if dist.get_rank() == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {dist.get_rank()}] %(message)s",
    )
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def load_checkpoint(path: Path) -> dict | None:
    """Rank 0 reads the checkpoint and sends it to every rank.

    Only rank 0 writes checkpoints, so on clusters without a shared filesystem the
    other nodes do not have the file.
    """
    payload = [None]
    if dist.get_rank() == 0 and path.exists():
        payload[0] = load_state(path)
    dist.broadcast_object_list(payload, src=0)
    return payload[0]


def train(args: argparse.Namespace, device: torch.device) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if args.precision == "fp16" and device.type != "cuda":
        raise SystemExit(
            "fp16 mixed precision needs CUDA; use --precision bf16 or fp32 on CPU"
        )
    seed_everything(args.seed)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs

    if rank == 0:
        data.prepare(args)  # downloads happen once, while the other ranks wait
    dist.barrier()
    dataset = data.build_dataset(args)
    train_set, val_set = split_dataset(dataset, args)
    # Each rank reads a disjoint shard of every epoch.
    sampler = DistributedSampler(
        train_set, num_replicas=world_size, rank=rank, seed=args.seed
    )
    loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0,
    )
    # Validation in order, padded to equal batch counts; evaluate() drops the padding.
    val_loader = DataLoader(
        val_set,
        batch_size=args.batch_size,
        sampler=DistributedSampler(
            val_set, num_replicas=world_size, rank=rank, shuffle=False
        ),
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
    )

    model = build_model(args, dataset.num_classes).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=args.weight_decay
    )
    scaler = make_scaler(args.precision)
    steps_per_epoch = math.ceil(len(loader) / args.grad_accum)
    total_steps = steps_per_epoch * args.epochs
    if args.max_steps is not None:
        total_steps = min(total_steps, args.max_steps)
    scheduler = lr_schedule(optimizer, total_steps, args.warmup_ratio)

    checkpoint_path = args.checkpoint_dir / "last.pt"
    position = {"epoch": -1, "step": 0, "best": -1.0}
    # After a failure torchrun restarts all workers (--max_restarts): resume.
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if args.resume or restarted or args.eval_only:
        state = load_checkpoint(checkpoint_path)
        if state is not None:
            position = restore(state, model, optimizer, scaler, scheduler)
            log.info(
                "resumed from %s at epoch %d, step %d",
                checkpoint_path,
                position["epoch"] + 1,
                position["step"],
            )
        elif args.resume or args.eval_only:
            raise SystemExit(f"--resume: no checkpoint at {checkpoint_path}")
    if args.eval_only:
        metrics = evaluate(model, val_loader, device, args)
        log.info(
            "validation: loss %.4f, accuracy %.4f", metrics["loss"], metrics["accuracy"]
        )
        return {"world_size": world_size, **{f"val_{k}": v for k, v in metrics.items()}}

    # DDP broadcasts rank 0's weights here, then all-reduces gradients in backward().
    wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    no_sync = wrapped.no_sync
    forward = torch.compile(wrapped) if args.compile else wrapped

    global_batch = args.batch_size * world_size * args.grad_accum
    log.info(
        "world size %d on %s (%s); global batch %d = %d per rank x %d ranks x %d accum",
        world_size,
        device.type,
        dist.get_backend(),
        global_batch,
        args.batch_size,
        world_size,
        args.grad_accum,
    )
    tracker = Tracker(args, enabled=rank == 0)
    monitor = Monitor(
        args, tracker, scheduler, global_batch, total_steps, position["step"],
        lambda: evaluate(model, val_loader, device, args),
    )  # fmt: skip
    started = time.perf_counter()
    step, losses = fit(
        args, forward, model, loader, optimizer, scaler, scheduler, device, no_sync,
        monitor, position, epoch_mean=mean_across_ranks, main_process=rank == 0,
    )  # fmt: skip
    tracker.close()

    parameters = list(model.parameters())
    dist.barrier()  # rank 0's checkpoints are on disk
    return smoke_report(
        losses,
        parameters,
        val_accuracy=monitor.metrics.get("accuracy"),
        checkpoint_loads=rank != 0
        or checkpoint_loads(args.checkpoint_dir, args, dataset.num_classes, parameters),
        device=device.type,
        precision=args.precision,
        steps=step,
        seconds=round(time.perf_counter() - started, 3),
    )


def main() -> None:
    args = parse_args()
    device = setup_distributed()
    try:
        report = train(args, device)
        if (args.smoke or args.eval_only) and dist.get_rank() == 0:
            print(SMOKE_MARKER + json.dumps(report), flush=True)
    finally:
        shutdown()  # train() returned: its model, optimizer and tensors are garbage


if __name__ == "__main__":
    main()
