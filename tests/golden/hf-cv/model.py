"""The model: a torchvision ResNet.

Plug in your own: return any ``nn.Module`` from ``build_model`` whose ``forward``
takes ``pixel_values`` and returns logits. ``--smoke`` builds a one-block-per-stage
ResNet with random weights (no download).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torchvision.models import ResNet18_Weights, resnet18
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

# --smoke's default learning rate: the smoke model learns the smoke data at it
SMOKE_LR = 2e-3


class ImageClassifier(nn.Module):
    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.backbone(pixel_values)


def build_model(args: argparse.Namespace, num_classes: int) -> nn.Module:
    if args.smoke:
        return ImageClassifier(
            ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes)
        )
    if args.pretrained:
        backbone = resnet18(weights=ResNet18_Weights.DEFAULT)
        backbone.fc = nn.Linear(backbone.fc.in_features, num_classes)  # a new head
    else:
        backbone = resnet18(weights=None, num_classes=num_classes)
    return ImageClassifier(backbone)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks, the units FSDP shards (gathered whole one at a time) and
    activation checkpointing recomputes: the residual blocks. For your own model, name
    its repeated blocks."""
    return [m for m in model.modules() if isinstance(m, (BasicBlock, Bottleneck))]
