"""The model: a small MLP classifier.

Plug in your own: return any ``nn.Module`` from ``build_model`` whose ``forward`` takes
the dataset's input entries as keyword arguments and returns logits. ``--smoke`` must
stay tiny, build without downloads and learn the smoke data at ``SMOKE_LR``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

import torch
from torch import nn

from data import IN_FEATURES


@dataclass(frozen=True)
class ModelConfig:
    in_features: int = IN_FEATURES
    hidden: int = 256
    depth: int = 2
    dropout: float = 0.1


SMOKE_CONFIG = ModelConfig(hidden=64, depth=1, dropout=0.0)
# --smoke's default learning rate: the smoke model learns the smoke data at it
SMOKE_LR = 2e-2


class Block(nn.Sequential):
    """One hidden layer."""

    def __init__(self, width_in: int, width: int, dropout: float) -> None:
        super().__init__(nn.Linear(width_in, width), nn.GELU(), nn.Dropout(dropout))


class Classifier(nn.Module):
    def __init__(self, config: ModelConfig, num_classes: int) -> None:
        super().__init__()
        widths = [config.in_features] + [config.hidden] * config.depth
        layers: list[nn.Module] = [
            Block(widths[i], widths[i + 1], config.dropout) for i in range(config.depth)
        ]
        layers.append(nn.Linear(widths[-1], num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


def build_model(args: argparse.Namespace, num_classes: int) -> nn.Module:
    config = SMOKE_CONFIG if args.smoke else ModelConfig()
    sizes = {"hidden": args.hidden, "depth": args.depth}
    return Classifier(
        replace(config, **{k: v for k, v in sizes.items() if v}), num_classes
    )


def blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks: the units FSDP shards (gathered whole one at a time) and
    activation checkpointing recomputes. For your own model, name its blocks
    (transformer layers, residual blocks)."""
    return [m for m in model.modules() if isinstance(m, Block)]
