"""Command-line options of train.py, with this project's defaults."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import torch

import data
from model import SMOKE_LR

# --smoke defaults: small enough to finish in seconds on two CPU processes, with enough
# optimizer steps (SMOKE_STEPS per epoch, at any world size) for the smoke model to
# learn at its SMOKE_LR: genie's smoke verdict checks that the loss fell.
SMOKE_EPOCHS = 2
SMOKE_BATCH_SIZE = 4
SMOKE_STEPS = 8
# Step checkpoints every SAVE_EVERY optimizer steps (the HF Trainer's default too): a
# few minutes of a typical run at 0.2-0.5 s per step; --smoke checkpoints mid-epoch.
SAVE_EVERY = 500
SMOKE_SAVE_EVERY = 3
# DataLoader workers per process at most, by default: each holds a copy of the dataset
# object, and more seldom help (--num-workers sets any number).
MAX_WORKERS = 8


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, help="default: 3 (2 with --smoke)")
    parser.add_argument(
        "--batch-size", type=int, help="per process; default: 32 (4 with --smoke)"
    )
    parser.add_argument(
        "--grad-accum", type=int, default=1, help="micro-batches per optimizer step"
    )
    parser.add_argument(
        "--lr", type=float, help=f"default: 0.001 ({SMOKE_LR} with --smoke)"
    )
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument(
        "--max-grad-norm",
        type=float,
        default=1.0,
        help="gradient clipping norm (0: off)",
    )
    parser.add_argument(
        "--warmup-ratio",
        type=float,
        default=0.05,
        help="share of steps with linear LR warmup",
    )
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="fp32")
    parser.add_argument("--compile", action="store_true", default=False)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument(
        "--activation-checkpointing",
        action="store_true",
        default=False,
        help="recompute each block's activations in backward: less memory, more time",
    )
    parser.add_argument(
        "--no-activation-checkpointing",
        dest="activation_checkpointing",
        action="store_false",
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--max-steps", type=int, default=None, help="stop after this many steps"
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


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--num-workers",
        type=int,
        help="DataLoader workers per process (default: its share of the CPUs, less one "
        f"for itself, at most {MAX_WORKERS})",
    )
    parser.add_argument(
        "--log-every", type=int, default=10, help="optimizer steps between logs"
    )
    parser.add_argument(
        "--tracker",
        choices=("tensorboard", "wandb", "mlflow", "none"),
        default="tensorboard",
        help="experiment tracker rank 0 logs to",
    )
    # --smoke writes under checkpoints/smoke and runs/smoke: a smoke run never replaces
    # the checkpoints of real training.
    parser.add_argument("--log-dir", type=Path, help="TensorBoard logs (default: runs)")
    parser.add_argument("--checkpoint-dir", type=Path, help="default: checkpoints")
    parser.add_argument(
        "--keep",
        type=int,
        default=2,
        help="checkpoints kept (besides the last and the best)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint"
    )
    parser.add_argument(
        "--save-every",
        type=int,
        help="optimizer steps between checkpoints within an epoch (0: at epoch ends "
        f"only); default: {SAVE_EVERY} ({SMOKE_SAVE_EVERY} with --smoke)",
    )
    parser.add_argument(
        "--eval-only",
        action="store_true",
        help="validate the last checkpoint, then stop",
    )
    parser.add_argument(
        "--dist-timeout",
        type=float,
        default=10.0,
        help="minutes a collective may wait for the other ranks before it fails",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny model, synthetic data, a few steps, no downloads",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train proj with PyTorch Lightning.")
    add_training_arguments(parser)
    add_run_arguments(parser)
    data.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = SMOKE_EPOCHS if args.smoke else 3
    if args.batch_size is None:
        args.batch_size = SMOKE_BATCH_SIZE if args.smoke else 32
    if args.lr is None:
        args.lr = SMOKE_LR if args.smoke else 0.001
    if args.save_every is None:
        args.save_every = SMOKE_SAVE_EVERY if args.smoke else SAVE_EVERY
    smoke = Path("smoke") if args.smoke else Path()
    args.checkpoint_dir = args.checkpoint_dir or Path("checkpoints") / smoke
    args.log_dir = args.log_dir or Path("runs") / smoke
    if args.smoke:
        args.num_workers = 0
        # the samples for SMOKE_STEPS optimizer steps per epoch on every rank, whatever
        # the world size (torchrun's, or srun's tasks) and the accumulation
        world_size = int(
            os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1"))
        )
        per_epoch = SMOKE_STEPS * args.batch_size * args.grad_accum * world_size
        args.smoke_samples = math.ceil(per_epoch / (1 - args.val_fraction))
    elif args.num_workers is None:
        args.num_workers = default_workers()
    if args.precision == "fp16" and not torch.cuda.is_available():
        # fp16 with a loss scaler needs CUDA: on a CPU machine (the laptop that
        # made the project, say) train in bf16, as genie smoke tests it there
        args.precision = "bf16"
        if os.environ.get("RANK", "0") == "0":
            print(
                "no CUDA here: training in bf16 instead of fp16 "
                "(--precision fp32 for full precision)",
                file=sys.stderr,
                flush=True,
            )
    if args.precision == "bf16" and torch.cuda.is_available() and not native_bf16():
        # V100, T4 and older: bf16 would be emulated (slow) or fail
        args.precision = "fp16"
        if os.environ.get("RANK", "0") == "0":
            print(
                f"{torch.cuda.get_device_name()} has no native bf16: training in fp16 "
                "with a loss scaler instead (--precision fp32 for full precision)",
                file=sys.stderr,
                flush=True,
            )
    return args


def default_workers() -> int:
    """This process's share of the CPUs it may run on (its affinity; SLURM's
    --cpus-per-task where that is fewer), less one for the process itself. torchrun's
    processes on a node share its CPUs; a process srun started alone has its task's."""
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:  # macOS
        cpus = os.cpu_count() or 1
    if os.environ.get("SLURM_CPUS_PER_TASK"):
        cpus = min(cpus, int(os.environ["SLURM_CPUS_PER_TASK"]))
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(0, min(MAX_WORKERS, cpus // processes - 1))


def native_bf16() -> bool:
    """Whether this GPU computes bf16 natively: compute capability 8.0 (Ampere) or
    newer (torch.cuda.is_bf16_supported() also says True where it is only emulated)."""
    return torch.cuda.get_device_capability() >= (8, 0)
