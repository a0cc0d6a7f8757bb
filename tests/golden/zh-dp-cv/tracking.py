"""Progress, logs and the experiment tracker, from the one process."""

from __future__ import annotations

import argparse
import datetime
import logging
import time
from collections.abc import Callable

import torch

log = logging.getLogger("train")


class Tracker:
    """TensorBoard, Weights & Biases or MLflow; a no-op where ``enabled`` is False."""

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


class Monitor:
    """Logs every --log-every steps (this rank's loss, LR, samples/s, ETA) and validates
    every --eval-every steps and at each epoch end, to the log and the tracker."""

    def __init__(
        self,
        args: argparse.Namespace,
        tracker: Tracker,
        global_batch: int,
        total_steps: int,
    ) -> None:
        self.args, self.tracker = args, tracker
        self.global_batch, self.total_steps = global_batch, total_steps
        self.since, self.since_step = time.perf_counter(), 0
        self.metrics: dict[str, float] = {}
        self.evaluate: Callable[[], dict[str, float]] = dict

    def after_step(self, step: int, loss: torch.Tensor, lr: float) -> None:
        if step % self.args.log_every == 0:
            now = time.perf_counter()
            rate = (step - self.since_step) * self.global_batch / (now - self.since)
            eta = datetime.timedelta(
                seconds=round(
                    (self.total_steps - step) * self.global_batch / max(rate, 1e-9)
                )
            )
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
