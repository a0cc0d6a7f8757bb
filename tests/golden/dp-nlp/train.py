"""Train proj with torch.nn.DataParallel.

One Python process drives every GPU of this machine: each batch is split across the
GPUs and the outputs are gathered on GPU 0. It is the simplest way to use several GPUs,
but slower than DistributedDataParallel even on one node (one process, and the model is
copied to every GPU every step); it cannot span nodes. To scale, regenerate the project
with `genie new ... --framework ddp`.

    bash launch/single_node.sh                 # python train.py
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.pt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

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
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
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


def training_state(model, optimizer, scaler, epoch: int, step: int) -> dict:
    """Everything a resume needs: weights, optimizer moments, loss scale, position."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "epoch": epoch,
        "step": step,
    }


def restore(state: dict, model, optimizer, scaler) -> tuple[int, int]:
    """Load a training_state(); returns the first epoch to run and the step count."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    return state["epoch"] + 1, state["step"]


def load_state(path: Path) -> dict:
    """Read a checkpoint this project wrote, onto the CPU."""
    return torch.load(
        path, map_location="cpu", weights_only=True
    )  # tensors and plain data


def checkpoint_loads(
    path: Path, args, num_classes: int, parameters: list[torch.Tensor]
) -> bool:
    """True when the checkpoint loads strictly into a freshly built, unwrapped model and
    holds exactly ``parameters`` (the weights training ended with)."""
    state = load_state(path)
    fresh = build_model(args, num_classes)
    fresh.load_state_dict(state["model"])
    saved = list(fresh.parameters())
    return len(saved) == len(parameters) and all(
        torch.equal(saved[i], parameters[i].detach().cpu()) for i in range(len(saved))
    )


def train_epoch(
    args: argparse.Namespace,
    forward: torch.nn.Module,
    model: torch.nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    scaler,
    device: torch.device,
    no_sync,
    step: int,
) -> tuple[int, list[torch.Tensor], torch.Tensor, int]:
    """One pass over ``loader`` with gradient accumulation.

    Returns the step count after it, the loss of each optimizer step, and the summed
    micro-batch loss and micro-batch count (for the epoch mean).
    """
    step_losses: list[torch.Tensor] = []
    epoch_loss, batches = torch.zeros((), device=device), 0
    step_loss = torch.zeros((), device=device)
    for i, batch in enumerate(loader):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        last_micro_step = (i + 1) % args.grad_accum == 0 or i + 1 == len(loader)
        # no_sync skips the gradient all-reduce on all but the last micro-step;
        # gradients accumulate locally and are averaged once, before the step.
        with contextlib.nullcontext() if last_micro_step else no_sync():
            with autocast(device, args.precision):
                loss = nn.functional.cross_entropy(forward(**batch), labels)
            scaler.scale(loss / args.grad_accum).backward()
        step_loss += loss.detach() / args.grad_accum
        epoch_loss += loss.detach()
        batches += 1
        if not last_micro_step:
            continue

        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        step_losses.append(step_loss)
        step_loss = torch.zeros((), device=device)
        if step % args.log_every == 0:
            log.info("step %d loss %.4f (rank 0)", step, step_losses[-1].item())
        if args.max_steps is not None and step >= args.max_steps:
            break
    return step, step_losses, epoch_loss, batches


def train(args: argparse.Namespace) -> dict:
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", 0) if gpus else torch.device("cpu")
    if args.precision == "fp16" and device.type != "cuda":
        raise SystemExit(
            "fp16 mixed precision needs CUDA; use --precision bf16 or fp32 on CPU"
        )
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs

    data.prepare(args)
    dataset = data.build_dataset(args)
    # DataParallel splits each batch across the GPUs: keep --batch-size per GPU.
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size * max(gpus, 1),
        shuffle=True,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0,
    )
    model = build_model(args, dataset.num_classes).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=args.weight_decay
    )
    scaler = make_scaler(args.precision)

    checkpoint_path = args.checkpoint_dir / "last.pt"
    start_epoch, step = 0, 0
    if args.resume:
        if not checkpoint_path.exists():
            raise SystemExit(f"--resume: no checkpoint at {checkpoint_path}")
        state = load_state(checkpoint_path)
        start_epoch, step = restore(state, model, optimizer, scaler)
        log.info(
            "resumed from %s at epoch %d, step %d", checkpoint_path, start_epoch, step
        )

    parallel = nn.DataParallel(model) if gpus > 1 else model
    forward = torch.compile(parallel) if args.compile else parallel
    log.info("DataParallel over %d %s", max(gpus, 1), "GPUs" if gpus else "CPU")

    losses = FirstLast()
    started = time.perf_counter()
    for epoch in range(start_epoch, args.epochs):
        parallel.train()
        epoch_started = time.perf_counter()
        step, step_losses, loss_sum, batches = train_epoch(
            args,
            forward,
            model,
            loader,
            optimizer,
            scaler,
            device,
            contextlib.nullcontext,
            step,
        )
        for step_loss in step_losses[:1] + step_losses[-1:]:
            losses.add(step_loss)
        throughput = batches * loader.batch_size / (time.perf_counter() - epoch_started)
        loss = (loss_sum / max(batches, 1)).item()
        log.info("epoch %d done: loss %.4f, %.0f samples/s", epoch, loss, throughput)
        save_checkpoint(
            checkpoint_path, training_state(model, optimizer, scaler, epoch, step)
        )
        if args.max_steps is not None and step >= args.max_steps:
            break

    return {
        "world_size": 1,  # one process
        "backend": "none",
        "devices": max(gpus, 1),
        "device": device.type,
        "precision": args.precision,
        "steps": step,
        "first_loss": losses.first.item() if losses.first is not None else None,
        "last_loss": losses.last.item() if losses.last is not None else None,
        # DataParallel keeps one copy of the weights and re-broadcasts it every step.
        "params_in_sync": True,
        "seconds": round(time.perf_counter() - started, 3),
    }


def main() -> None:
    args = parse_args()
    logging.basicConfig(
        stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s"
    )
    report = train(args)
    if args.smoke:
        print(SMOKE_MARKER + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
