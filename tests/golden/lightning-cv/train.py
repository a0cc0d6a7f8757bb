"""Train proj with PyTorch Lightning (DDP strategy).

One process per device, started by torchrun (see launch/ and README.md); Lightning reads
the topology torchrun (or SLURM) sets up:

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset, random_split

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
        default="tensorboard",
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
        dataset = data.build_dataset(self.args)
        self.num_classes = dataset.num_classes
        self.train_set, self.val_set = split_dataset(dataset, self.args)

    def train_dataloader(self) -> DataLoader:
        # Lightning swaps in a DistributedSampler and calls its set_epoch every epoch.
        return DataLoader(
            self.train_set,
            batch_size=self.args.batch_size,
            shuffle=True,
            num_workers=self.args.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.args.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        # In order; Lightning shards it with a DistributedSampler that pads the last
        # batch (validation_step leaves the padding out).
        return DataLoader(
            self.val_set,
            batch_size=self.args.batch_size,
            num_workers=self.args.num_workers,
        )


class Classifier(L.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.net: nn.Module | None = None
        self.losses = (
            FirstLast()
        )  # first and latest micro-batch loss, for the smoke report

    def configure_model(self) -> None:
        # Built here, not in __init__: the class count comes from the data module.
        if self.net is None:
            self.net = build_model(self.args, self.trainer.datamodule.num_classes)
            if self.args.compile:
                self.net = torch.compile(self.net)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        labels = batch.pop("labels")
        loss = nn.functional.cross_entropy(self.net(**batch), labels)
        # The per-step value stays local (syncing it would add a collective per step).
        self.log("train/loss", loss, prog_bar=True)
        detached = loss.detach()
        self.losses.add(detached)
        self.loss_sum.add_(detached)  # in place: no nn.Module.__setattr__ per step
        self.batches += 1
        return loss

    def on_validation_epoch_start(self) -> None:
        # loss sum, correct, count: summed over ranks at the end, not averaged means
        self.val_totals = torch.zeros(3, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        labels = batch.pop("labels")
        logits = self.net(**batch)
        real = real_samples(
            self.global_rank,
            self.trainer.world_size,
            len(self.trainer.datamodule.val_set),
            batch_idx * self.args.batch_size,
            len(labels),
        ).to(self.device)
        loss = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        correct = logits.argmax(dim=-1) == labels
        self.val_totals += torch.stack(
            [loss[real].sum(), correct[real].sum(), real.sum()]
        ).double()

    def on_validation_epoch_end(self) -> None:
        loss_sum, correct, count = self.trainer.strategy.reduce(
            self.val_totals, reduce_op="sum"
        ).tolist()
        # Already the same on every rank: no sync_dist needed.
        self.log("val/loss", loss_sum / max(count, 1))
        self.log("val/accuracy", correct / max(count, 1), prog_bar=True)

    def on_train_epoch_start(self) -> None:
        self.loss_sum, self.batches = torch.zeros((), device=self.device), 0

    def on_train_epoch_end(self) -> None:
        # The epoch mean, averaged across ranks once (cheaper than on_epoch=True, which
        # updates Lightning's result collection every step).
        self.log(
            "train/loss_epoch", self.loss_sum / max(self.batches, 1), sync_dist=True
        )

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.AdamW(
            self.parameters(), lr=self.args.lr, weight_decay=self.args.weight_decay
        )
        # over every optimizer step of all epochs
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = lr_schedule(optimizer, total, self.args.warmup_ratio)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


class Throughput(Callback):
    """Logs samples/s every --log-every steps; the progress bar shows the ETA."""

    def __init__(self, every: int, global_batch: int) -> None:
        self.every, self.global_batch = every, global_batch
        self.since, self.since_step = time.perf_counter(), 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step - self.since_step >= self.every and trainer.logger is not None:
            now = time.perf_counter()
            rate = (step - self.since_step) * self.global_batch / (now - self.since)
            trainer.logger.log_metrics({"train/samples_per_s": rate}, step=step)
            self.since, self.since_step = now, step


def make_logger(args: argparse.Namespace):
    """The tracker; Lightning's loggers write from global rank 0 only."""
    try:
        if args.tracker == "tensorboard":
            return TensorBoardLogger(save_dir=str(args.log_dir), name="", version="")
        if args.tracker == "wandb":
            from lightning.pytorch.loggers import WandbLogger

            return WandbLogger(project="proj", config=vars(args))
        if args.tracker == "mlflow":
            from lightning.pytorch.loggers import MLFlowLogger

            return MLFlowLogger(
                experiment_name="proj",
                tracking_uri=os.environ.get("MLFLOW_TRACKING_URI"),
            )
    except (ImportError, ModuleNotFoundError) as err:
        raise SystemExit(
            f"--tracker {args.tracker}: {err}; pip install it, or pass --tracker none"
        ) from None
    return False


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


def checkpoint_loads(
    paths: list[Path], args, num_classes: int, parameters: list[torch.Tensor]
) -> bool:
    """True when every checkpoint loads strictly into a freshly built, unwrapped model
    and the first holds exactly ``parameters`` (the weights training ended with)."""
    fresh = build_model(args, num_classes)
    for path in reversed(paths):
        state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
        fresh.load_state_dict({k[len("net.") :]: v for k, v in state.items()})
    return holds_exactly(fresh, parameters)


def train(args: argparse.Namespace) -> dict | None:
    L.seed_everything(args.seed, workers=True)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs
    if args.precision == "fp16" and not torch.cuda.is_available():
        raise SystemExit(
            "fp16 mixed precision needs CUDA; use --precision bf16 or fp32 on CPU"
        )
    devices, num_nodes = topology()
    # last.ckpt for resuming; the --keep best by validation accuracy (at least one).
    checkpoints = ModelCheckpoint(
        dirpath=args.checkpoint_dir,
        filename="best-{epoch:04d}",
        monitor="val/accuracy",
        mode="max",
        save_top_k=max(1, args.keep),
        save_last=True,
    )
    global_batch = args.batch_size * devices * num_nodes * args.grad_accum
    logger = make_logger(args)
    callbacks = [checkpoints, Throughput(args.log_every, global_batch)]
    if logger:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    module = Classifier(args)
    trainer = L.Trainer(
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=devices,
        num_nodes=num_nodes,
        strategy="ddp",
        precision=PRECISION[args.precision],
        max_epochs=args.epochs,
        max_steps=args.max_steps if args.max_steps is not None else -1,
        accumulate_grad_batches=args.grad_accum,
        gradient_clip_val=args.max_grad_norm,
        log_every_n_steps=args.log_every,
        # --eval-every counts optimizer steps; Lightning counts micro-batches
        val_check_interval=(
            args.eval_every * args.grad_accum if args.eval_every else None
        ),
        callbacks=callbacks,
        default_root_dir=args.checkpoint_dir,
        logger=logger,
        enable_model_summary=not args.smoke,
    )
    if trainer.global_rank == 0:
        log.info(
            "global batch %d = %d per process x %d processes x %d accumulation",
            global_batch, args.batch_size, devices * num_nodes, args.grad_accum,
        )  # fmt: skip
    # After a failure torchrun restarts all workers (--max_restarts): resume.
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    last = args.checkpoint_dir / "last.ckpt"
    if (args.resume or args.eval_only) and not last.exists():
        raise SystemExit(f"--resume: no checkpoint at {last}")
    datamodule = DataModule(args)
    if args.eval_only:
        [metrics] = trainer.validate(module, datamodule=datamodule, ckpt_path=str(last))
        return {"world_size": trainer.world_size, **metrics}
    trainer.fit(
        module,
        datamodule=datamodule,
        ckpt_path=str(last) if (args.resume or restarted) and last.exists() else None,
    )
    if not args.smoke:
        return None
    parameters = list(module.net.parameters())
    trainer.strategy.barrier()  # rank 0's checkpoints are on disk
    loads = trainer.global_rank != 0 or checkpoint_loads(
        [last, Path(checkpoints.best_model_path)],
        args,
        datamodule.num_classes,
        parameters,
    )
    return smoke_report(
        module.losses,
        parameters,
        val_accuracy=float(trainer.callback_metrics["val/accuracy"]),
        checkpoint_loads=loads,
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
