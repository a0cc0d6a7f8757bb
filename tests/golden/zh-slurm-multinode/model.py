"""The model: a small MLP classifier.

Plug in your own: return any ``nn.Module`` from ``build_model`` whose ``forward`` takes
the dataset's input entries as keyword arguments and returns logits. ``--smoke`` must
stay tiny and build without downloads.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from torch import nn

from data import IN_FEATURES


@dataclass(frozen=True)
class ModelConfig:
    in_features: int = IN_FEATURES
    hidden: int = 256
    depth: int = 2
    dropout: float = 0.1


SMOKE_CONFIG = ModelConfig(hidden=16, depth=1, dropout=0.0)


class Classifier(nn.Module):
    def __init__(self, config: ModelConfig, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = config.in_features
        for _ in range(config.depth):
            layers += [
                nn.Linear(width, config.hidden),
                nn.GELU(),
                nn.Dropout(config.dropout),
            ]
            width = config.hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


def build_model(args: argparse.Namespace, num_classes: int) -> nn.Module:
    return Classifier(SMOKE_CONFIG if args.smoke else ModelConfig(), num_classes)
