"""The task every throughput baseline trains: the same as a generated custom project."""

import os

import torch
from torch import nn
from torch.utils.data import Dataset

NUM_SAMPLES = int(os.environ.get("BENCH_SAMPLES", "8192"))
IN_FEATURES, NUM_CLASSES, HIDDEN = 32, 10, 256


class Synthetic(Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(NUM_SAMPLES, IN_FEATURES, generator=g)
        self.y = (self.x @ torch.randn(IN_FEATURES, NUM_CLASSES, generator=g)).argmax(1)

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, i: int) -> dict:
        return {"features": self.x[i], "labels": self.y[i]}


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Dropout(0.1),
        nn.Linear(HIDDEN, NUM_CLASSES),
    )  # fmt: skip
