"""The model: a torchvision ResNet.

Plug in your own: return any ``nn.Module`` from ``build_model`` whose ``forward``
takes ``pixel_values`` and returns logits. ``--smoke`` builds a one-block-per-stage
ResNet with random weights (no download). Small images (CIFAR's 32 px) get a stem that
keeps their resolution.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torchvision.models import ResNet18_Weights, resnet18
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

import data

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
        backbone = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes)
    elif args.pretrained:
        backbone = resnet18(weights=ResNet18_Weights.DEFAULT)
        backbone.fc = nn.Linear(backbone.fc.in_features, num_classes)  # a new head
    else:
        backbone = resnet18(weights=None, num_classes=num_classes)
    if data.image_size(args) <= data.SMALL_IMAGES:
        small_image_stem(backbone)
    model = ImageClassifier(backbone)
    if torch.cuda.is_available():
        # Inputs keep one size: cuDNN times its algorithms once per shape, then uses
        # the fastest.
        torch.backends.cudnn.benchmark = True
    return model


def small_image_stem(backbone: ResNet) -> None:
    """The CIFAR ResNet's stem (He et al. 2016): a 3x3 convolution at full resolution,
    no max-pooling. ImageNet's (a stride-2 7x7 convolution, then max-pooling) leaves
    8x8 of a 32x32 image to the residual stages. With --pretrained, every layer but
    this one keeps its ImageNet weights."""
    width = backbone.conv1.out_channels
    backbone.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
    backbone.maxpool = nn.Identity()


def blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks, the units FSDP shards (gathered whole one at a time) and
    activation checkpointing recomputes: the residual blocks. For your own model, name
    its repeated blocks."""
    return [m for m in model.modules() if isinstance(m, (BasicBlock, Bottleneck))]
