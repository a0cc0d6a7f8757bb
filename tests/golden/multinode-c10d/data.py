"""The data: a synthetic classification set that a model can really learn.

Plug in your own: return any map-style ``torch.utils.data.Dataset`` from
``build_dataset`` whose items are ``(inputs, target)`` pairs. Every rank must build
the same dataset in the same order: ``DistributedSampler`` shards it by index.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, TensorDataset

IN_FEATURES = 32
NUM_CLASSES = 10
NUM_SAMPLES = 8192
SMOKE_NUM_SAMPLES = 64


def synthetic_classification(num_samples: int, seed: int = 0) -> TensorDataset:
    """Gaussian inputs labelled by a fixed random linear teacher: learnable."""
    generator = torch.Generator().manual_seed(seed)  # same data on every rank
    inputs = torch.randn(num_samples, IN_FEATURES, generator=generator)
    teacher = torch.randn(IN_FEATURES, NUM_CLASSES, generator=generator)
    targets = (inputs @ teacher).argmax(dim=1)
    return TensorDataset(inputs, targets)


def build_dataset(smoke: bool = False) -> Dataset:
    return synthetic_classification(SMOKE_NUM_SAMPLES if smoke else NUM_SAMPLES)
