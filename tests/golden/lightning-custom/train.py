"""Train proj with PyTorch Lightning (DDP strategy).

One process per device, started by torchrun (see launch/ and README.md); Lightning reads
the topology torchrun (or SLURM) sets up:

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import sys
from collections.abc import Iterator

import lightning as L
import torch
from lightning.pytorch.callbacks import (
    LearningRateMonitor,
    ModelCheckpoint,
    TQDMProgressBar,
)
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader
from tqdm.contrib.logging import logging_redirect_tqdm

import data
import dist_utils
from config import parse_args
from evaluation import real_samples, split_dataset
from model import blocks, build_model
from optim import build_optimizer, lr_schedule
from tracking import Throughput, make_logger, quiet_answered_notices

log = logging.getLogger("train")

PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32-true"}


class DataModule(L.LightningDataModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args

    def setup(self, stage: str) -> None:
        self.train_set, self.val_set = split_dataset(self.args)
        self.num_classes = self.train_set.num_classes

    def train_dataloader(self) -> DataLoader:
        # Sharded here, so that a resumed epoch skips what it has trained.
        # drop_last: no short last batch (BatchNorm cannot normalize a single sample).
        return dist_utils.ResumableLoader(
            self.train_set,
            batch_size=self.args.batch_size,
            sampler=dist_utils.ResumableSampler(self.train_set, seed=self.args.seed),
            drop_last=True,
            collate_fn=self.train_set.collate_fn,
            num_workers=self.args.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.args.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        val, args = self.val_set, self.args
        return dist_utils.eval_loader(
            val, args.batch_size, args.num_workers, val.collate_fn
        )


class Classifier(L.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.net: nn.Module | None = None
        self.shapes: dict[str, list[int]] = {}  # the net's, which checkpoints must fit
        # the first and latest loss, for --smoke
        self.first_loss: torch.Tensor | None = None
        self.last_loss: torch.Tensor | None = None

    def configure_model(self) -> None:
        # Built here, not in __init__: the class count comes from the data module.
        if self.net is None:
            self.net = build_model(self.args, self.trainer.datamodule.num_classes)
            # The same weights on every rank; then distinct dropout on each.
            dist_utils.seed_all(self.args.seed + self.global_rank)
            self.shapes = dist_utils.shapes(self.state_dict())  # before any wrapping
            if self.args.activation_checkpointing:
                dist_utils.checkpoint_activations(self.net, blocks(self.net))
            if self.args.compile:
                self.net.compile()  # in place: checkpoint keys stay net.*

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Every rank runs this hook; rank 0 writes the file with all ranks' RNG states.
        checkpoint["rng"] = dist_utils.all_rng_states()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # Another model's checkpoint stops here, in one line, before Lightning loads it
        theirs = dist_utils.shapes(checkpoint.get("state_dict"))
        problem = dist_utils.misfit(self.shapes, theirs)
        dist_utils.stop_if_misfit(self.trainer.ckpt_path, problem)
        rng = checkpoint.get("rng", ())
        if len(rng) == self.trainer.world_size:  # else: another world size, fresh seeds
            dist_utils.set_rng_state(rng[self.global_rank])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        labels = batch.pop("labels")
        loss = nn.functional.cross_entropy(self.net(**batch), labels)
        # The per-step value stays local (syncing it would add a collective per step).
        self.log("train/loss", loss, prog_bar=True)
        detached = loss.detach()
        self.first_loss = detached if self.first_loss is None else self.first_loss
        self.last_loss = detached
        self.loss_sum.add_(detached)  # in place: no nn.Module.__setattr__ per step
        self.batches += 1
        return loss

    def on_validation_epoch_start(self) -> None:
        # loss sum, correct, count: summed over ranks at the end, not averaged means
        self.val_totals = torch.zeros(3, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        labels = batch.pop("labels")
        logits = self.net(**batch)
        start = batch_idx * self.args.batch_size
        ranks = (self.global_rank, self.trainer.world_size)
        total = len(self.trainer.datamodule.val_set)
        real = real_samples(*ranks, total, start, len(labels)).to(self.device)
        loss = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        correct = logits.argmax(dim=-1) == labels
        totals = torch.stack([loss[real].sum(), correct[real].sum(), real.sum()])
        self.val_totals += totals.double()

    def on_validation_epoch_end(self) -> None:
        totals = self.trainer.strategy.reduce(self.val_totals, reduce_op="sum")
        loss_sum, correct, count = totals.tolist()
        # Already the same on every rank: no sync_dist needed.
        self.log("val/loss", loss_sum / max(count, 1))
        self.log("val/accuracy", correct / max(count, 1), prog_bar=True)

    def on_train_epoch_start(self) -> None:
        self.loss_sum, self.batches = torch.zeros((), device=self.device), 0

    on_train_start = on_train_epoch_start  # a resume mid-epoch starts no epoch

    def on_train_epoch_end(self) -> None:
        # The epoch mean, averaged across ranks once (on_epoch=True works every step)
        mean = self.loss_sum / max(self.batches, 1)
        self.log("train/loss_epoch", mean, sync_dist=True)

    def configure_optimizers(self) -> dict:
        optimizer = build_optimizer(self, self.args)
        # over every optimizer step of all epochs
        total = dist_utils.optimizer_steps(self)
        scheduler = lr_schedule(optimizer, total, self.args.warmup_ratio)
        schedule = {"scheduler": scheduler, "interval": "step"}
        return {"optimizer": optimizer, "lr_scheduler": schedule}


def build_trainer(args: argparse.Namespace, module: Classifier) -> L.Trainer:
    devices, num_nodes = dist_utils.topology()
    # The --keep best by validation accuracy; last.ckpt every --save-every steps and
    # at epoch ends, by callbacks of its own (save_last=True: only at a new best).
    best = ModelCheckpoint(
        dirpath=args.checkpoint_dir,
        filename="best-{epoch:04d}",
        monitor="val/accuracy",
        mode="max",
        save_top_k=max(1, args.keep),
    )
    last = [
        ModelCheckpoint(
            args.checkpoint_dir, "last", enable_version_counter=False, **when
        )
        for when in (
            {"every_n_train_steps": args.save_every},
            {"save_on_train_epoch_end": True},
        )
    ]
    global_batch = args.batch_size * devices * num_nodes * args.grad_accum
    logger = make_logger(args)
    # best first: trainer.checkpoint_callback is the first ModelCheckpoint
    callbacks = [best, *last, Throughput(args.log_every, global_batch)]
    # SIGTERM, SIGUSR1: last.ckpt at the next optimizer step, then exit 75
    callbacks.append(dist_utils.Preemption(args.checkpoint_dir))
    if logger:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    # The bar only on a terminal (in a pipe or a log it is a wall of updates); tqdm's,
    # not rich's, so that log lines can go above it (see logs_above_the_bar).
    bar = sys.stderr.isatty()
    if bar:
        callbacks.append(TQDMProgressBar())
    timeout = datetime.timedelta(minutes=args.dist_timeout)
    if int(os.environ.get("RANK", "0")) == 0:
        log.info(
            "global batch %d = %d per process x %d processes x %d accumulation",
            global_batch, args.batch_size, devices * num_nodes, args.grad_accum,
        )  # fmt: skip
    return L.Trainer(
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=devices,
        num_nodes=num_nodes,
        strategy=DDPStrategy(timeout=timeout, gradient_as_bucket_view=True),
        precision=PRECISION[args.precision],
        use_distributed_sampler=False,  # the loaders shard themselves
        max_epochs=args.epochs,
        max_steps=args.max_steps if args.max_steps is not None else -1,
        accumulate_grad_batches=args.grad_accum,
        gradient_clip_val=args.max_grad_norm,
        log_every_n_steps=args.log_every,
        # --eval-every counts optimizer steps; Lightning counts micro-batches
        val_check_interval=args.eval_every * args.grad_accum or None,  # 0: epoch ends
        callbacks=callbacks,
        default_root_dir=args.checkpoint_dir,
        logger=logger,
        enable_model_summary=not args.smoke,
        enable_progress_bar=bar,
    )


def summary_line(args: argparse.Namespace, trainer: L.Trainer) -> str:
    """The one line a run ends with: epochs, best validation, where the results are."""
    best = trainer.checkpoint_callback
    score = getattr(best, "best_model_score", None)
    line = f"done: {trainer.current_epoch}/{args.epochs} epochs, "
    if score is not None:
        line += (
            f"best validation accuracy {float(score):.4f} in {best.best_model_path}; "
        )
    line += f"checkpoints in {args.checkpoint_dir}/ (last.ckpt, best-*.ckpt)"
    if args.tracker != "none":
        line += f", {args.tracker} logs in {args.log_dir}/"
    return line


@contextlib.contextmanager
def logs_above_the_bar() -> Iterator[None]:
    """Log lines and warnings, ours and Lightning's, go above the progress bar
    (tqdm.write), never glued onto it."""
    own = [logging.getLogger(f"lightning.{part}") for part in ("pytorch", "fabric")]
    logging.captureWarnings(True)  # warnings become log records (py.warnings)
    try:
        with logging_redirect_tqdm(loggers=[logging.root, *own]):
            yield
    finally:
        logging.captureWarnings(False)


def train(args: argparse.Namespace) -> None:
    quiet_answered_notices()
    L.seed_everything(args.seed, workers=True)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs
    module = Classifier(args)
    trainer = build_trainer(args, module)
    # --resume, a torchrun restart (--max_restarts) or a start after a preemption
    resume = dist_utils.resume_point(args.checkpoint_dir, args.resume or args.eval_only)
    # Downloads once per shared disk (all nodes, or each node), before setup(): not
    # in prepare_data, where a failed download leaves the others in Lightning's barrier.
    dist_utils.prepare_once(lambda: data.prepare(args), data.prepared_dir(args))
    datamodule = DataModule(args)
    if args.eval_only:
        with logs_above_the_bar():
            trainer.validate(module, datamodule=datamodule, ckpt_path=str(resume))
        return
    if args.smoke:
        import smoke_check

        smoke_check.arm_fault(module, args.checkpoint_dir)  # GENIE_FAULT, for tests
    with logs_above_the_bar():
        ckpt_path = str(resume) if resume else None
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    if trainer.is_global_zero:
        log.info(summary_line(args, trainer))
    if args.smoke:
        smoke_check.check_run(trainer, module, datamodule.num_classes)


# torchrun then shows the exception a failed rank raised, not only its exit code
@record
def main() -> None:
    args = parse_args()
    # The process group, joined here with --dist-timeout; Lightning uses it as it is.
    dist_utils.setup(args.dist_timeout)
    try:
        train(args)
    finally:
        dist_utils.shutdown()  # after train() returned: its tensors are garbage now


if __name__ == "__main__":
    main()
