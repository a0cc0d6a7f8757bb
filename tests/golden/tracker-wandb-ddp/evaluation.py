"""The held-out split and validation that is exact across ranks."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

import data


def split_dataset(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """Hold out --val-fraction of the data for validation, the same split on every rank.

    The validation part is read without training augmentation. Have a separate
    validation set? Return it here instead.
    """
    train_view, val_view = data.build_datasets(args)
    val_size = max(1, round(len(train_view) * args.val_fraction))
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(train_view), generator=generator).tolist()
    train_set = Subset(train_view, order[val_size:])
    val_set = Subset(val_view, order[:val_size])
    train_set.num_classes = val_set.num_classes = train_view.num_classes
    # how a batch is made where the items need it (texts padded to the longest)
    train_set.collate_fn = val_set.collate_fn = getattr(train_view, "collate_fn", None)
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


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: DataLoader, device: torch.device, autocast
) -> dict:
    """Loss and accuracy over the whole validation set, exact across ranks: sums and
    counts are all-reduced (not per-rank means averaged) and padding is left out."""
    distributed = dist.is_initialized()
    rank, world_size = (
        (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    )
    model.eval()
    # Loss sum, correct predictions, sample count.
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    seen = 0
    for batch in loader:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        with autocast():
            logits = model(**batch)
        real = real_samples(rank, world_size, len(loader.dataset), seen, len(labels))
        real = real.to(device)
        seen += len(labels)
        loss = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
        correct = logits.argmax(dim=-1) == labels
        totals += torch.stack(
            [loss[real].sum(), correct[real].sum(), real.sum()]
        ).double()
    if distributed:
        dist.all_reduce(totals)
    model.train()
    loss_sum, correct_sum, count = totals.tolist()
    return {
        "loss": loss_sum / count,
        "accuracy": correct_sum / count,
        "count": int(count),
    }
