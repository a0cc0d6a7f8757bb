"""The held-out split and validation that is exact across ranks."""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import Dataset, Subset

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
