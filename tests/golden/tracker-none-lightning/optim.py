"""The optimizer, the learning-rate schedule and the loss scaler."""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn


def build_optimizer(
    model: nn.Module, args: argparse.Namespace
) -> torch.optim.Optimizer:
    """AdamW that decays weights only (biases and normalization layers' parameters are
    not decayed, as in the HF Trainer)."""
    decay: list[nn.Parameter] = []
    other: list[nn.Parameter] = []
    seen: set[int] = set()  # a shared parameter belongs to one group
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            if parameter.requires_grad and id(parameter) not in seen:
                seen.add(id(parameter))
                exempt = name == "bias" or "Norm" in type(module).__name__
                (other if exempt else decay).append(parameter)
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]
    # not fused: Lightning's mixed precision refuses to clip the gradients of an
    # optimizer that unscales them itself (a fused one)
    return torch.optim.AdamW(groups, lr=args.lr)


class WarmupCosine:
    """The LR factor at each step: linear warmup over the first ``warmup_ratio`` of the
    steps from ``start`` to ``end``, then cosine decay to 0 at ``end``. An object, not a
    function, because the scheduler's state_dict then holds its fields: a checkpoint
    carries the schedule it followed."""

    def __init__(self, end: int, warmup_ratio: float, start: int = 0) -> None:
        self.end, self.warmup_ratio, self.start = end, warmup_ratio, start

    def __call__(self, step: int) -> float:
        steps, step = self.end - self.start, step - self.start
        warmup = (
            max(1, round(steps * self.warmup_ratio)) if self.warmup_ratio > 0 else 0
        )
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def lr_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float
):
    """Linear warmup over the first warmup_ratio of the steps, then cosine decay."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupCosine(total_steps, warmup_ratio)
    )
