"""Train proj with the Hugging Face Trainer.

One process per device, started by torchrun (see launch/ and README.md); the Trainer
(through accelerate) reads the topology torchrun sets up:

    bash launch/single_node.sh                 # this machine, 2 processes
    bash launch/single_node.sh --smoke         # tiny model, synthetic data, a few steps
    bash launch/single_node.sh --resume        # continue from the last checkpoint-N
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import Dataset, random_split
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.integrations import TensorBoardCallback
from transformers.trainer_utils import get_last_checkpoint

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


class WithLoss(nn.Module):
    """Adds the loss the Trainer expects to a model that returns logits."""

    # The loss is a per-batch mean: the Trainer must scale it for gradient accumulation
    # itself instead of passing num_items_in_batch.
    accepts_loss_kwargs = False

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, labels: torch.Tensor | None = None, **inputs: torch.Tensor
    ) -> dict:
        logits = self.model(**inputs)
        loss = (
            nn.functional.cross_entropy(logits, labels) if labels is not None else None
        )
        return {"loss": loss, "logits": logits}


class LossRecorder(TrainerCallback):
    """Keeps the logged training loss (already averaged across ranks) for the report."""

    def __init__(self) -> None:
        self.losses = FirstLast()

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if logs and "loss" in logs:
            self.losses.add(torch.tensor(float(logs["loss"])))


def compute_metrics(prediction) -> dict[str, float]:
    """Validation accuracy over the whole set; the Trainer gathers all ranks' logits."""
    logits, labels = prediction.predictions, prediction.label_ids
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def tracking_callbacks(args: argparse.Namespace) -> list:
    if args.tracker != "tensorboard":
        return []
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise SystemExit(
            "--tracker tensorboard: tensorboard is not installed; "
            "pip install tensorboard, or pass --tracker none"
        ) from None
    return [TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(args.log_dir)))]


def checkpoint_loads(folders: list[str], args, num_classes: int, parameters) -> bool:
    """True when every checkpoint loads strictly into a freshly built model and the
    first holds exactly ``parameters`` (the weights the Trainer ended with: the best).
    """
    fresh = WithLoss(build_model(args, num_classes))
    for folder in reversed(folders):
        fresh.load_state_dict(load_file(str(Path(folder) / "model.safetensors")))
    return holds_exactly(fresh, parameters)


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
        max_grad_norm=args.max_grad_norm,
        bf16=args.precision == "bf16",
        fp16=args.precision == "fp16",
        use_cpu=not cuda,
        ddp_backend="nccl" if cuda else "gloo",
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
        # TensorBoard gets a callback of its own (its folder is set the same way in
        # every transformers version); wandb and mlflow go through the integrations.
        report_to=[args.tracker] if args.tracker in ("wandb", "mlflow") else "none",
        seed=args.seed,
        torch_compile=args.compile,
    )


def train(args: argparse.Namespace) -> dict | None:
    if args.precision == "fp16" and not torch.cuda.is_available():
        raise SystemExit(
            "fp16 mixed precision needs CUDA; use --precision bf16 or fp32 on CPU"
        )
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer GPUs
    training_args = training_arguments(
        args
    )  # joins the process group torchrun prepared
    with training_args.main_process_first(desc="preparing data"):
        data.prepare(args)  # downloads happen once, while the other ranks wait
        dataset = data.build_dataset(args)
    train_set, val_set = split_dataset(dataset, args)
    world_size = training_args.world_size
    global_batch = args.batch_size * world_size * args.grad_accum
    total_steps = math.ceil(len(train_set) / global_batch) * args.epochs
    if args.max_steps is not None:
        total_steps = min(total_steps, args.max_steps)
    # Linear warmup for --warmup-ratio of the steps (an int works in every version).
    training_args.warmup_steps = round(total_steps * args.warmup_ratio)
    if training_args.process_index == 0:
        log.info(
            "world size %d; global batch %d = %d per process x %d processes x %d accum",
            world_size, global_batch, args.batch_size, world_size, args.grad_accum,
        )  # fmt: skip
    recorder = LossRecorder()
    trainer = Trainer(
        model=WithLoss(build_model(args, dataset.num_classes)),
        args=training_args,
        train_dataset=train_set,
        eval_dataset=val_set,
        compute_metrics=compute_metrics,
        callbacks=[recorder, *tracking_callbacks(args)],
    )
    # After a failure torchrun restarts all workers (--max_restarts): resume.
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    last = (
        get_last_checkpoint(str(args.checkpoint_dir))
        if args.checkpoint_dir.is_dir()
        else None
    )
    if args.resume and last is None:
        raise SystemExit(f"--resume: no checkpoint-N folder in {args.checkpoint_dir}")
    trainer.train(resume_from_checkpoint=last if (args.resume or restarted) else None)
    if not args.smoke:
        return None
    accuracy = [
        e["eval_accuracy"] for e in trainer.state.log_history if "eval_accuracy" in e
    ]
    parameters = list(trainer.model.parameters())
    best = trainer.state.best_model_checkpoint
    newest = get_last_checkpoint(str(args.checkpoint_dir))
    loads = not trainer.is_world_process_zero() or checkpoint_loads(
        [best, newest], args, dataset.num_classes, parameters
    )
    return smoke_report(
        recorder.losses,
        parameters,
        val_accuracy=max(accuracy) if accuracy else None,
        checkpoint_loads=loads,
        device="cuda" if torch.cuda.is_available() else "cpu",
        precision=args.precision,
        steps=trainer.state.global_step,
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
