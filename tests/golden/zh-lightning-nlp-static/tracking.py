"""Progress, logs and the experiment tracker (Lightning's loggers write from global
rank 0 only)."""

from __future__ import annotations

import argparse
import os
import time

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
