"""Train proj with PyTorch DistributedDataParallel (DDP).

One process per device, started by torchrun (see launch/ and README.md):

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.pt
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from data import build_dataset
from model import build_model

log = logging.getLogger("train")

SMOKE_MARKER = "GENIE_SMOKE "
# --smoke overrides: small enough to finish in seconds on two CPU processes.
SMOKE_EPOCHS = 2
SMOKE_BATCH_SIZE = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
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
        "--resume", action="store_true", help="continue from CHECKPOINT_DIR/last.pt"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny model, synthetic data, a few steps, no downloads",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.batch_size, args.num_workers = (
            SMOKE_EPOCHS,
            SMOKE_BATCH_SIZE,
            0,
        )
    return args


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


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(precision: str) -> torch.cuda.amp.GradScaler:
    # fp16 gradients underflow without loss scaling; bf16 has fp32's range: no scaler.
    return torch.amp.GradScaler("cuda", enabled=precision == "fp16")


def mean_across_ranks(value: torch.Tensor) -> float:
    """Average a scalar over all ranks (gloo has no ReduceOp.AVG, so sum and divide)."""
    total = value.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / dist.get_world_size()


def params_in_sync(model: nn.Module) -> bool:
    """True when all ranks hold identical parameters (elementwise max == min)."""
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return bool(torch.equal(high, low))


def save_checkpoint(path: Path, state: dict) -> None:
    """Write a temp file, then rename it: a crash mid-save keeps the old checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict | None:
    """Rank 0 reads the checkpoint and sends it to every rank.

    Only rank 0 writes checkpoints, so on clusters without a shared filesystem the
    other nodes do not have the file.
    """
    payload = [None]
    if dist.get_rank() == 0 and path.exists():
        payload[0] = torch.load(path, map_location="cpu", weights_only=True)
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

    dataset = build_dataset(smoke=args.smoke)
    # Each rank reads a disjoint shard of every epoch.
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, seed=args.seed
    )
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0,
    )

    model = build_model(smoke=args.smoke).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=args.weight_decay
    )
    scaler = make_scaler(args.precision)
    loss_fn = nn.CrossEntropyLoss()

    checkpoint_path = args.checkpoint_dir / "last.pt"
    start_epoch, step = 0, 0
    # After a failure torchrun restarts all workers (--max_restarts): resume.
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if args.resume or restarted:
        state = load_checkpoint(checkpoint_path)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            start_epoch, step = state["epoch"] + 1, state["step"]
            log.info(
                "resumed from %s at epoch %d, step %d",
                checkpoint_path,
                start_epoch,
                step,
            )
        elif args.resume:
            raise SystemExit(f"--resume: no checkpoint at {checkpoint_path}")

    # DDP broadcasts rank 0's weights here, then all-reduces gradients in backward().
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    forward = torch.compile(ddp_model) if args.compile else ddp_model

    samples_per_step = args.batch_size * world_size * args.grad_accum
    log.info(
        "world size %d on %s (%s); global batch %d = %d per rank x %d ranks x %d",
        world_size,
        device.type,
        dist.get_backend(),
        samples_per_step,
        args.batch_size,
        world_size,
        args.grad_accum,
    )

    step_losses: list[torch.Tensor] = []
    started = time.perf_counter()
    for epoch in range(start_epoch, args.epochs):
        # Without set_epoch every epoch would replay the same shuffle on every rank.
        sampler.set_epoch(epoch)
        ddp_model.train()
        epoch_loss, epoch_batches = torch.zeros((), device=device), 0
        step_loss = torch.zeros((), device=device)
        epoch_started = time.perf_counter()
        for i, (inputs, targets) in enumerate(loader):
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            last_micro_step = (i + 1) % args.grad_accum == 0 or i + 1 == len(loader)
            # no_sync skips the gradient all-reduce on all but the last micro-step;
            # gradients accumulate locally and are averaged once, before the step.
            with contextlib.nullcontext() if last_micro_step else ddp_model.no_sync():
                with autocast(device, args.precision):
                    loss = loss_fn(forward(inputs), targets)
                scaler.scale(loss / args.grad_accum).backward()
            step_loss += loss.detach() / args.grad_accum
            epoch_loss += loss.detach()
            epoch_batches += 1
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
                log.info(
                    "epoch %d step %d loss %.4f (rank 0)",
                    epoch,
                    step,
                    step_losses[-1].item(),
                )
            if args.max_steps is not None and step >= args.max_steps:
                break

        seconds = time.perf_counter() - epoch_started
        loss = mean_across_ranks(epoch_loss / max(epoch_batches, 1))
        throughput = epoch_batches * args.batch_size * world_size / seconds
        log.info("epoch %d done: loss %.4f, %.0f samples/s", epoch, loss, throughput)
        if rank == 0:
            save_checkpoint(
                checkpoint_path,
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(),
                    "epoch": epoch,
                    "step": step,
                },
            )
        if args.max_steps is not None and step >= args.max_steps:
            break

    report = {
        "world_size": world_size,
        "backend": dist.get_backend(),
        "device": device.type,
        "precision": args.precision,
        "steps": step,
        "first_loss": mean_across_ranks(step_losses[0]) if step_losses else None,
        "last_loss": mean_across_ranks(step_losses[-1]) if step_losses else None,
        "params_in_sync": params_in_sync(model),
        "seconds": round(time.perf_counter() - started, 3),
    }
    dist.barrier()  # rank 0's checkpoint is on disk before anyone exits
    return report


def main() -> None:
    args = parse_args()
    device = setup_distributed()
    try:
        report = train(args, device)
        if args.smoke and dist.get_rank() == 0:
            print(SMOKE_MARKER + json.dumps(report), flush=True)
    finally:
        # train() has returned, so the model, optimizer and collective results are
        # unreferenced; collect them before tearing the group down. Otherwise gloo can
        # abort at exit while a worker thread frees the last collective's tensors
        # (pytorch/pytorch#190489).
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
