"""Train proj with PyTorch Lightning (FSDP strategy).

One process per device, started by torchrun (see launch/ and README.md); Lightning reads
the topology torchrun (or SLURM) sets up:

    bash launch/single_node.sh                 # this machine, 8 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import sys
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
)
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy
from torch.utils.data import DataLoader

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
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
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


PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32-true"}


class DataModule(L.LightningDataModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args

    def prepare_data(self) -> None:
        data.prepare(
            self.args
        )  # downloads: once per node, before setup() on every rank

    def setup(self, stage: str) -> None:
        self.dataset = data.build_dataset(self.args)
        self.num_classes = self.dataset.num_classes

    def train_dataloader(self) -> DataLoader:
        # Lightning swaps in a DistributedSampler and calls its set_epoch every epoch.
        return DataLoader(
            self.dataset,
            batch_size=self.args.batch_size,
            shuffle=True,
            num_workers=self.args.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.args.num_workers > 0,
        )


class Classifier(L.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.net: nn.Module | None = None
        self.losses = (
            FirstLast()
        )  # first and latest micro-batch loss, for the smoke report
        self.shard_units: set[nn.Module] = set()

    def configure_model(self) -> None:
        # Built here, not in __init__: the class count comes from the data module.
        if self.net is None:
            self.net = build_model(self.args, self.trainer.datamodule.num_classes)
            self.shard_units = set(
                shard_units(self.net)
            )  # read by the FSDP wrap policy
            if self.args.compile:
                self.net = torch.compile(self.net)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        labels = batch.pop("labels")
        loss = nn.functional.cross_entropy(self.net(**batch), labels)
        # The per-step value stays local (syncing it would add a collective per step).
        self.log("train_loss", loss, prog_bar=True)
        self.losses.add(loss.detach())
        self.loss_sum += loss.detach()
        self.batches += 1
        return loss

    def on_train_epoch_start(self) -> None:
        self.loss_sum, self.batches = torch.zeros((), device=self.device), 0

    def on_train_epoch_end(self) -> None:
        # The epoch mean, averaged across ranks once (cheaper than on_epoch=True, which
        # updates Lightning's result collection every step).
        self.log(
            "train_loss_epoch", self.loss_sum / max(self.batches, 1), sync_dist=True
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            self.parameters(), lr=self.args.lr, weight_decay=self.args.weight_decay
        )


def fsdp_strategy(module: Classifier) -> FSDPStrategy:
    """FSDP1 under Lightning: each unit of shard_units() is wrapped (and gathered) on
    its own. Checkpoints hold the full state dict, written by rank 0."""
    policy = functools.partial(
        lambda_auto_wrap_policy, lambda_fn=lambda m: m in module.shard_units
    )
    return FSDPStrategy(auto_wrap_policy=policy, state_dict_type="full")


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
    from torch.distributed.fsdp import FullyShardedDataParallel

    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules())


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


def train(args: argparse.Namespace) -> dict | None:
    L.seed_everything(args.seed, workers=True)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs
    if args.precision == "fp16" and not torch.cuda.is_available():
        raise SystemExit(
            "fp16 mixed precision needs CUDA; use --precision bf16 or fp32 on CPU"
        )
    devices, num_nodes = topology()
    checkpoints = ModelCheckpoint(dirpath=args.checkpoint_dir, save_last=True)
    module = Classifier(args)
    trainer = L.Trainer(
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=devices,
        num_nodes=num_nodes,
        strategy=fsdp_strategy(module),
        precision=PRECISION[args.precision],
        max_epochs=args.epochs,
        max_steps=args.max_steps if args.max_steps is not None else -1,
        accumulate_grad_batches=args.grad_accum,
        gradient_clip_val=args.max_grad_norm,
        log_every_n_steps=args.log_every,
        callbacks=[checkpoints],
        default_root_dir=args.checkpoint_dir,
        logger=False,
        enable_model_summary=not args.smoke,
    )
    # After a failure torchrun restarts all workers (--max_restarts): resume.
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    last = args.checkpoint_dir / "last.ckpt"
    if args.resume and not last.exists():
        raise SystemExit(f"--resume: no checkpoint at {last}")
    trainer.fit(
        module,
        datamodule=DataModule(args),
        ckpt_path=str(last) if (args.resume or restarted) and last.exists() else None,
    )
    if not args.smoke:
        return None
    return smoke_report(
        module.losses,
        full_parameters(trainer.strategy.model),
        strategy="fsdp" if is_sharded(trainer.strategy.model) else "ddp",
        device="cuda" if torch.cuda.is_available() else "cpu",
        precision=args.precision,
        steps=trainer.global_step,
    )


def main() -> None:
    args = parse_args()
    logging.basicConfig(stream=sys.stdout, level=logging.INFO)
    try:
        report = train(args)
        if report is not None and dist.get_rank() == 0:
            print(SMOKE_MARKER + json.dumps(report), flush=True)
    finally:
        shutdown()  # train() returned: the trainer, model and tensors are garbage


if __name__ == "__main__":
    main()
