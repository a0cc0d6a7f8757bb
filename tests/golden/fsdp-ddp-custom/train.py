"""Train proj with PyTorch Fully Sharded Data Parallel (FSDP2, fully_shard).

One process per device, started by torchrun (see launch/ and README.md):

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.pt
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import logging
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import data
from model import build_model, shard_units

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
    """Everything a resume needs: weights, optimizer moments, loss scale, position.

    Gathered whole (full state dicts, keyed by parameter name) onto rank 0's CPU: a
    collective, so every rank calls it. The file loads into the plain, unsharded model
    and back into FSDP at any world size.
    """
    model_state, optimizer_state = get_state_dict(
        model,
        optimizer,
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )
    return {
        "model": model_state,
        "optimizer": optimizer_state,
        "scaler": scaler.state_dict(),
        "epoch": epoch,
        "step": step,
    }


def restore(state: dict, model, optimizer, scaler) -> tuple[int, int]:
    """Load a training_state() into the sharded model; every rank passes it whole."""
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=StateDictOptions(full_state_dict=True),
    )
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


def mean_across_ranks(value: torch.Tensor) -> float:
    """Average a scalar over all ranks (gloo has no ReduceOp.AVG, so sum and divide)."""
    # NCCL reduces only CUDA tensors.
    cuda = dist.get_backend() == "nccl"
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if cuda
        else torch.device("cpu")
    )
    total = value.detach().to(device=device, dtype=torch.float32, copy=True)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / dist.get_world_size()


def params_in_sync(parameters: list[torch.Tensor]) -> bool:
    """True when all ranks hold identical parameters (elementwise max == min)."""
    flat = torch.cat([p.detach().float().reshape(-1) for p in parameters])
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


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """FSDP2: split each unit of shard_units(), then the rest, across the ranks.

    A unit's parameters are gathered whole only for its forward and backward, so at rest
    a rank holds 1/world_size of the weights, gradients and optimizer state. With bf16
    the gathered weights compute in bfloat16 while the sharded master weights and the
    gradient reduction stay fp32.
    """
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for unit in shard_units(model):
        fully_shard(unit, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


@contextlib.contextmanager
def gradients_stay_local(model: nn.Module) -> Iterator[None]:
    """FSDP2's no_sync: accumulate unsharded gradients, reduce-scatter them later."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def full_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter of a sharded model, gathered on every rank (a collective)."""
    options = StateDictOptions(full_state_dict=True)
    state = get_model_state_dict(model, options=options)
    # FSDP1 puts its wrappers into parameter names; the state dict has the model's own.
    names = {
        name.replace("_fsdp_wrapped_module.", "")
        for name, _ in model.named_parameters()
    }
    return [tensor for name, tensor in state.items() if name in names]


def is_sharded(model: nn.Module) -> bool:
    """True when FSDP really wraps ``model`` (frameworks may fall back to DDP)."""
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


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

    model = build_model(args, dataset.num_classes).to(device)
    # From here on each rank holds only its shard of every parameter.
    model = shard(model, device, args.precision)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=args.weight_decay
    )
    scaler = make_scaler(args.precision)

    checkpoint_path = args.checkpoint_dir / "last.pt"
    start_epoch, step = 0, 0
    # After a failure torchrun restarts all workers (--max_restarts): resume.
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if args.resume or restarted:
        state = load_checkpoint(checkpoint_path)
        if state is not None:
            start_epoch, step = restore(state, model, optimizer, scaler)
            log.info(
                "resumed from %s at epoch %d, step %d",
                checkpoint_path,
                start_epoch,
                step,
            )
        elif args.resume:
            raise SystemExit(f"--resume: no checkpoint at {checkpoint_path}")

    wrapped = model
    no_sync = functools.partial(gradients_stay_local, model)
    forward = torch.compile(wrapped) if args.compile else wrapped

    log.info(
        "world size %d on %s (%s); global batch %d = %d per rank x %d ranks x %d",
        world_size,
        device.type,
        dist.get_backend(),
        args.batch_size * world_size * args.grad_accum,
        args.batch_size,
        world_size,
        args.grad_accum,
    )
    losses = FirstLast()
    started = time.perf_counter()
    for epoch in range(start_epoch, args.epochs):
        # Without set_epoch every epoch would replay the same shuffle on every rank.
        sampler.set_epoch(epoch)
        wrapped.train()
        epoch_started = time.perf_counter()
        step, step_losses, loss_sum, batches = train_epoch(
            args, forward, model, loader, optimizer, scaler, device, no_sync, step
        )
        for step_loss in step_losses[:1] + step_losses[-1:]:
            losses.add(step_loss)
        seconds = time.perf_counter() - epoch_started
        loss = mean_across_ranks(loss_sum / max(batches, 1))
        throughput = batches * args.batch_size * world_size / seconds
        log.info("epoch %d done: loss %.4f, %.0f samples/s", epoch, loss, throughput)
        # Every rank takes part in gathering the shards; only rank 0 writes the file.
        state = training_state(model, optimizer, scaler, epoch, step)
        if rank == 0:
            save_checkpoint(checkpoint_path, state)
        del state
        if args.max_steps is not None and step >= args.max_steps:
            break

    parameters = full_parameters(model)
    dist.barrier()  # rank 0's checkpoint is on disk
    report = smoke_report(
        losses,
        parameters,
        strategy="fsdp" if is_sharded(model) else "ddp",
        checkpoint_loads=rank != 0
        or checkpoint_loads(checkpoint_path, args, dataset.num_classes, parameters),
        device=device.type,
        precision=args.precision,
        steps=step,
        seconds=round(time.perf_counter() - started, 3),
    )
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
        shutdown()  # train() returned: its model, optimizer and tensors are garbage


if __name__ == "__main__":
    main()
