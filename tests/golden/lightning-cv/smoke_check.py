"""What genie reads to judge a --smoke run; train.py imports it only under --smoke.

Global rank 0 prints one line, ``GENIE_SMOKE {json}``: the world size and backend
that trained, the first and last loss, whether every rank ends with identical weights,
the validation accuracy, and whether the checkpoints written load into a fresh model.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from dist_utils import collective_device, mean_across_ranks
from model import build_model

MARKER = "GENIE_SMOKE "
FAULT = "GENIE_FAULT"  # genie's fault switch, for its reliability tests


def emit(report: dict) -> None:
    """Print the report line in one write, newline included, so that no other output
    (another rank's, a progress bar's) can land inside it."""
    sys.stdout.write(MARKER + json.dumps(report) + "\n")
    sys.stdout.flush()


def arm_fault(trainer, marker_dir: Path) -> None:
    """Make one rank fail on purpose when ``GENIE_FAULT`` asks (see README.md):
    ``hang:RANK`` (or ``hang:RANK:STEP``), ``raise:RANK`` and ``exit:RANK:CODE`` at
    its first training step, ``kill:RANK:STEP`` (SIGKILL) at its STEP-th, once: a
    marker file (in ``marker_dir``, or ``GENIE_FAULT_MARKER``) lets the restarted job
    train on. ``grad:RANK:FACTOR`` multiplies that rank's gradients by FACTOR before
    the ranks average them, at every step: a broken gradient that stays in sync;
    ``slow:RANK:SECONDS`` sleeps that long at every step (a run slow enough to stop).
    RANK ``*``: every rank this environment reaches (one node's). ``usr1:RANK:STEP``
    sends SIGUSR1 (a preemption notice) during STEP."""
    record_first_step(trainer)
    kind, _, rest = os.environ.get(FAULT, "").partition(":")
    rank, _, arg = rest.partition(":")
    if not kind or rank not in ("*", os.environ.get("RANK", "0")):
        return
    if kind == "grad":
        scale_gradients(trainer, float(arg))
        return
    marker = Path(os.environ.get("GENIE_FAULT_MARKER", marker_dir / "fault-fired"))
    fired = marker.read_text().split() if marker.exists() else []
    at = [int(arg) if kind in ("kill", "usr1") or (kind == "hang" and arg) else 1]
    steps = 0

    def fault() -> None:
        nonlocal steps
        steps += 1
        if kind == "slow":
            time.sleep(float(arg))
            return
        if steps not in at or (kind == "kill" and str(steps) in fired):
            return
        print(
            f"GENIE_FAULT {kind} on rank {os.environ.get('RANK', '0')} at step {steps}",
            flush=True,
        )
        if kind == "hang":
            while True:
                time.sleep(1)
        if kind == "raise":
            raise RuntimeError(f"GENIE_FAULT: rank {rank} raised on purpose")
        if kind == "exit":
            os._exit(int(arg))
        if kind == "usr1":
            os.kill(os.getpid(), signal.SIGUSR1)
        if kind == "kill":
            marker.parent.mkdir(parents=True, exist_ok=True)
            with open(marker, "a") as f:  # the steps it fired at, one per line
                f.write(f"{steps}\n")
            os.kill(os.getpid(), signal.SIGKILL)

    training_step = trainer.training_step

    def faulty_step(*args, **kwargs):
        fault()
        return training_step(*args, **kwargs)

    trainer.training_step = faulty_step  # each micro-batch of training


class ScaledGradient(torch.autograd.Function):
    """The identity forward; backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


def record_first_step(module) -> None:
    """module.first_step: the optimizer step this start of training began with (after a
    resume, the checkpoint's step + 1), for the report."""
    module.first_step = None
    training_step = module.training_step

    def recorded_step(*args, **kwargs):
        if module.first_step is None:
            module.first_step = module.global_step + 1
        return training_step(*args, **kwargs)

    module.training_step = recorded_step


def scale_gradients(module, scale: float) -> None:
    """Scale every gradient of this rank's backward by ``scale``, through the loss
    training_step returns (its value, which the module logs, stays as it is)."""
    training_step = module.training_step

    def scaled_step(*args, **kwargs):
        return ScaledGradient.apply(training_step(*args, **kwargs), scale)

    module.training_step = scaled_step


def holds_exactly(model: nn.Module, parameters: list[torch.Tensor]) -> bool:
    """True when ``model``'s parameters equal ``parameters``, one for one."""
    saved = list(model.parameters())
    return len(saved) == len(parameters) and all(
        torch.equal(saved[i], parameters[i].detach().cpu()) for i in range(len(saved))
    )


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


def report(first_loss, last_loss, parameters: list[torch.Tensor], **facts) -> dict:
    """The smoke facts; every rank must call it (it runs collectives)."""
    return {
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        **facts,
        "first_loss": mean_across_ranks(first_loss) if first_loss is not None else None,
        "last_loss": mean_across_ranks(last_loss) if last_loss is not None else None,
        "params_in_sync": params_in_sync(parameters),
    }


def checkpoint_loads(paths: list[Path], args, num_classes: int, parameters) -> bool:
    """True when every checkpoint loads strictly into a freshly built, unwrapped model
    and the first holds exactly ``parameters`` (the weights training ended with)."""
    fresh = build_model(args, num_classes)
    for path in reversed(paths):
        state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
        fresh.load_state_dict({k[len("net.") :]: v for k, v in state.items()})
    return holds_exactly(fresh, parameters)


def check_run(trainer, module, num_classes: int) -> None:
    """Report a finished Trainer.fit; every rank calls it (it runs collectives)."""
    args = module.args
    parameters = list(module.net.parameters())
    trainer.strategy.barrier()  # rank 0's checkpoints are on disk
    best = Path(trainer.checkpoint_callback.best_model_path)
    loads = trainer.global_rank != 0 or checkpoint_loads(
        [args.checkpoint_dir / "last.ckpt", best], args, num_classes, parameters
    )
    facts = report(
        module.first_loss, module.last_loss, parameters,
        epoch_loss=float(trainer.callback_metrics["train/loss_epoch"]),
        val_accuracy=float(trainer.callback_metrics["val/accuracy"]),
        checkpoint_loads=loads,
        device="cuda" if torch.cuda.is_available() else "cpu", precision=args.precision,
        steps=trainer.global_step, first_step=module.first_step,
    )  # fmt: skip
    if trainer.global_rank == 0:
        emit(facts)
