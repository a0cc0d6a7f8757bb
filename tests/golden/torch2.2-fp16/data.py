"""The data: a synthetic classification set that a model can really learn.

Plug in your own: return map-style ``Dataset``s from ``build_datasets`` whose items
are dicts of tensors with a ``labels`` entry (the other entries are the model's inputs),
and give it a ``num_classes`` attribute. Every rank must build the same dataset in the
same order: ``DistributedSampler`` shards it by index. Under ``--smoke``, keep data a
tiny model learns in a few steps, ``args.smoke_samples`` of it (genie's smoke test
checks that the loss fell).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.utils.data import Dataset

IN_FEATURES = 32
NUM_CLASSES = 10
NUM_SAMPLES = 8192


class SyntheticClassification(Dataset):
    """One Gaussian cluster per class around a fixed random centre: learnable."""

    num_classes = NUM_CLASSES

    def __init__(self, num_samples: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)  # the same data on every rank
        centres = torch.randn(NUM_CLASSES, IN_FEATURES, generator=generator)
        self.labels = torch.randint(NUM_CLASSES, (num_samples,), generator=generator)
        noise = torch.randn(num_samples, IN_FEATURES, generator=generator)
        self.features = centres[self.labels] + 0.5 * noise

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"features": self.features[index], "labels": self.labels[index]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--num-samples",
        type=int,
        help=f"default: {NUM_SAMPLES} (a few steps' worth with --smoke)",
    )
    # the model's size (model.py), e.g. for measuring memory; default: its own
    parser.add_argument("--hidden", type=int, help="width of the hidden layers")
    parser.add_argument("--depth", type=int, help="number of hidden layers")


def prepare(args: argparse.Namespace) -> None:
    """Download or preprocess into prepared_dir(), by one process while the others wait:
    one for all nodes where they share it, else one per node; synthetic data needs
    nothing. Where the data cannot be had (offline, say),
    ``raise SystemExit("what is missing: the flag that fixes it")``: that one line is
    shown and every rank stops."""


def prepared_dir(args: argparse.Namespace) -> Path:
    """Where prepare() writes (change it with prepare()): the ranks check whether every
    node sees it, and then one process prepares it for all nodes, else one per node.
    --smoke prepares nothing; its checkpoints' folder stands in."""
    return args.checkpoint_dir if args.smoke else Path("data")


def build_datasets(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """The same samples twice: for training, and for evaluation (which would skip any
    augmentation). The held-out split is made from them in evaluation.py."""
    default = args.smoke_samples if args.smoke else NUM_SAMPLES
    dataset = SyntheticClassification(args.num_samples or default)
    return dataset, dataset
