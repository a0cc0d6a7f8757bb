"""Train proj with the Hugging Face Trainer.

One process per device, started by torchrun (see launch/ and README.md); the Trainer
(through accelerate) reads the topology torchrun sets up:

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from the last checkpoint-N
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys

import torch
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.integrations import TensorBoardCallback

import data
import dist_utils
from config import parse_args
from evaluation import split_dataset
from model import blocks, build_model

log = logging.getLogger("train")


class WithLoss(nn.Module):
    """Adds the loss the Trainer expects to a model that returns logits."""

    # The loss is a per-batch mean: the Trainer must scale it for gradient accumulation
    # itself instead of passing num_items_in_batch.
    accepts_loss_kwargs = False

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, labels: torch.Tensor | None = None, **inputs) -> dict:
        logits = self.model(**inputs)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def with_loss(args: argparse.Namespace, num_classes: int) -> WithLoss:
    model = build_model(args, num_classes)
    if args.activation_checkpointing:
        dist_utils.checkpoint_activations(model, blocks(model))
    return WithLoss(model)


class DropLastTrainer(Trainer):
    """Drops the short last training batch (BatchNorm cannot normalize one sample).
    dataloader_drop_last would drop the last evaluation samples too."""

    def get_train_dataloader(self):
        self.args.dataloader_drop_last = True
        try:
            return super().get_train_dataloader()
        finally:
            self.args.dataloader_drop_last = False


class LossRecorder(TrainerCallback):
    """Keeps the first and latest logged training loss (already averaged over ranks),
    and the logged losses of the current epoch."""

    first_loss: torch.Tensor | None = None
    last_loss: torch.Tensor | None = None

    def __init__(self) -> None:
        self.epoch_losses: list[float] = []  # this recorder's own list, not the class's

    def on_epoch_begin(self, args, state, control, **kwargs) -> None:
        self.epoch_losses = []

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if logs and "loss" in logs:
            self.last_loss = torch.tensor(float(logs["loss"]))
            if self.first_loss is None:
                self.first_loss = self.last_loss
            self.epoch_losses.append(float(logs["loss"]))

    def epoch_loss(self) -> float | None:
        """The mean logged loss of the last epoch (every step's, under --smoke)."""
        losses = self.epoch_losses
        return sum(losses) / len(losses) if losses else None


class Preemption(TrainerCallback):
    """SIGUSR1 (SLURM's notice) or SIGTERM (Kubernetes, torchrun): save at the end of
    an optimizer step, stop, and exit PREEMPTED. The ranks agree (dist_utils.StopVote),
    so all stop at the same step, within about half a second of the signal."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.vote = dist_utils.StopVote()
        self.stopped: str | None = None  # the signal that stopped training
        for number in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(
                number, lambda received, frame: self.received.append(received)
            )

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.vote(bool(self.received)):
            self.stopped = dist_utils.stop_reason(self.received)
            control.should_save = control.should_training_stop = True
            args.load_best_model_at_end = False  # the run exits next: no time to spend

    def on_epoch_end(self, args, state, control, **kwargs) -> None:
        if self.stopped:  # no epoch-end validation, no second save of the same step
            control.should_evaluate = control.should_save = False

    def finish(self, trainer: Trainer, folder) -> None:
        """After training: if stopped, leave PREEMPTED_FILE and exit PREEMPTED."""
        if not self.stopped:
            return
        step = trainer.state.global_step
        checkpoint = folder / f"checkpoint-{step}"
        # each node's main process writes where the disk is not shared
        dist_utils.exit_preempted(
            self.stopped, step, checkpoint, trainer.args.should_save
        )


def compute_metrics(prediction) -> dict[str, float]:
    """Validation accuracy over the whole set; the Trainer gathers all ranks' logits."""
    logits, labels = prediction.predictions, prediction.label_ids
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def tracking_callbacks(args: argparse.Namespace, main_process: bool) -> list:
    """TensorBoard from global rank 0 only (a writer on every rank would leave an empty
    event file per rank); wandb and mlflow go through the Trainer's integrations."""
    if args.tracker != "tensorboard" or not main_process:
        return []
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise SystemExit(
            "--tracker tensorboard: tensorboard is not installed; "
            "pip install tensorboard, or pass --tracker none"
        ) from None
    return [TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(args.log_dir)))]


def training_arguments(args: argparse.Namespace) -> TrainingArguments:
    cuda = torch.cuda.is_available()
    return TrainingArguments(
        output_dir=str(args.checkpoint_dir),
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps if args.max_steps is not None else -1,
        learning_rate=args.lr,
        weight_decay=args.weight_decay,
        # AdamW in one kernel per step on GPUs
        optim="adamw_torch_fused" if cuda else "adamw_torch",
        max_grad_norm=args.max_grad_norm,
        bf16=args.precision == "bf16",
        fp16=args.precision == "fp16",
        use_cpu=not cuda,
        ddp_backend="nccl" if cuda else "gloo",
        ddp_timeout=round(args.dist_timeout * 60),  # seconds a collective may wait
        # Every parameter gets a gradient: skip DDP's search for unused ones.
        ddp_find_unused_parameters=False,
        dataloader_num_workers=args.num_workers,
        dataloader_pin_memory=cuda,
        remove_unused_columns=False,  # the batches are dicts the model reads whole
        # Validate and checkpoint together (every --eval-every steps, else every
        # epoch); the best checkpoint by accuracy is kept besides the --keep newest and
        # reloaded at the end. Evaluation gathers predictions without the padding.
        eval_strategy="steps" if args.eval_every else "epoch",
        save_strategy="steps" if args.eval_every else "epoch",
        eval_steps=args.eval_every or None,
        save_steps=args.eval_every or None,
        per_device_eval_batch_size=args.batch_size,
        metric_for_best_model="accuracy",
        greater_is_better=True,
        load_best_model_at_end=True,
        save_total_limit=max(1, args.keep) + 1,
        lr_scheduler_type="cosine",  # after warmup_steps, set in train()
        logging_steps=1 if args.smoke else args.log_every,
        # The NaN/inf filter reads the loss on the host every micro-step (a GPU sync);
        # the logged loss then includes a NaN, which is worth seeing.
        logging_nan_inf_filter=False,
        # TensorBoard gets a callback of its own (its folder is set the same way in
        # every transformers version); wandb and mlflow go through the integrations.
        report_to=[args.tracker] if args.tracker in ("wandb", "mlflow") else "none",
        # The model is built before the Trainer, seeded with --seed on every rank; the
        # Trainer then reseeds each rank differently (dropout), while one data_seed
        # keeps the ranks' shards of each epoch disjoint.
        seed=args.seed + int(os.environ.get("RANK", "0")),
        data_seed=args.seed,
        torch_compile=args.compile,
        # The bar only on a terminal (in a pipe or a log it is a wall of updates).
        disable_tqdm=not sys.stderr.isatty(),
    )


def summary_line(args: argparse.Namespace, trainer: Trainer) -> str:
    """The one line a run ends with: epochs, best validation, where the results are."""
    state = trainer.state
    line = f"done: {round(state.epoch or 0)}/{args.epochs} epochs, "
    if state.best_metric is not None:
        line += f"best validation accuracy {state.best_metric:.4f}"
        line += f" in {state.best_model_checkpoint}; "
    line += f"checkpoints in {args.checkpoint_dir}/ (checkpoint-*)"
    if args.tracker != "none":
        line += f", {args.tracker} logs in {args.log_dir}/"
    return line


def train(args: argparse.Namespace) -> None:
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs
    # TrainingArguments join the process group torchrun prepared.
    training_args = training_arguments(args)
    # The Trainer reloads the best checkpoint on every rank at the end (and resumes from
    # the newest): without a filesystem all nodes share, each node writes its own copy.
    training_args.save_on_each_node = not dist_utils.shared_dir(args.checkpoint_dir)
    # downloads once per shared disk (all nodes, or each node without one)
    dist_utils.prepare_once(lambda: data.prepare(args), data.prepared_dir(args))
    train_set, val_set = split_dataset(args)
    world_size = training_args.world_size
    global_batch = args.batch_size * world_size * args.grad_accum
    batches = len(train_set) // (args.batch_size * world_size)
    total_steps = math.ceil(batches / args.grad_accum) * args.epochs
    total_steps = min(total_steps, args.max_steps or total_steps)
    # Linear warmup for --warmup-ratio of the steps (an int works in every version).
    training_args.warmup_steps = round(total_steps * args.warmup_ratio)
    main_process = training_args.process_index == 0
    if main_process:
        log.info(
            "world size %d; global batch %d = %d per process x %d processes x %d accum",
            world_size, global_batch, args.batch_size, world_size, args.grad_accum,
        )  # fmt: skip
    set_seed(args.seed)  # the same initial weights on every rank, run after run
    recorder = LossRecorder()
    preemption = Preemption()  # from here on, SIGUSR1 and SIGTERM stop at a step
    trainer = DropLastTrainer(
        model=with_loss(args, train_set.num_classes),
        args=training_args,
        train_dataset=train_set,
        eval_dataset=val_set,
        data_collator=train_set.collate_fn,  # None: the Trainer's default
        compute_metrics=compute_metrics,
        callbacks=[recorder, preemption, *tracking_callbacks(args, main_process)],
    )
    resume = dist_utils.resume_point(args.checkpoint_dir, args.resume)
    dist_utils.check_fits(trainer.model, resume)  # the Trainer loads non-strictly
    if args.smoke:
        import smoke_check

        smoke_check.arm_fault(trainer, args.checkpoint_dir)  # GENIE_FAULT, for tests
    # Log lines, ours and the Trainer's, go above its bars (tqdm.write), not onto them.
    loggers = [logging.root, logging.getLogger("transformers")]
    with logging_redirect_tqdm(loggers=loggers):
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    preemption.finish(trainer, args.checkpoint_dir)
    if main_process:
        log.info(summary_line(args, trainer))
    if args.smoke:
        fresh = WithLoss(build_model(args, train_set.num_classes))
        smoke_check.check_run(trainer, recorder, args, fresh)


# torchrun then shows the exception a failed rank raised, not only its exit code
@record
def main() -> None:
    args = parse_args()
    logging.basicConfig(stream=sys.stdout, level=logging.INFO)
    try:
        train(args)
    finally:
        dist_utils.shutdown()  # after train() returned: its tensors are garbage now


if __name__ == "__main__":
    main()
