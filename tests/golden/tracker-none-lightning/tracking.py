"""Progress, logs and the experiment tracker (Lightning's loggers write from global
rank 0 only), and the Lightning notices this project has answered."""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger


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


def quiet_answered_notices() -> None:
    """Silence the notices Lightning prints that this project has already answered."""
    # val/loss and val/accuracy are logged after the project's own all-reduce of
    # their sums (on_validation_epoch_end): exact, sync_dist would average them again.
    warnings.filterwarnings(
        "ignore", message=r"It is recommended to use `self.log\('val"
    )
    # The ranks are started by torchrun, or by srun in launch/slurm.sbatch: never by a
    # plain python under SLURM, which is what this hint is for.
    warnings.filterwarnings("ignore", message=r"The `srun` command is available")
    # Lightning 2.6 calls a pytree check newer torch deprecates: nothing to do here.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`")
    # An advertisement for a cloud logger; this project logs with --tracker.
    for part in ("pytorch", "fabric"):
        rank_zero = logging.getLogger(f"lightning.{part}.utilities.rank_zero")
        rank_zero.addFilter(lambda record: "litlogger" not in record.getMessage())
