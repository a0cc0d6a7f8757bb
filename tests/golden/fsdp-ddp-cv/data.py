"""The data: image classification with torchvision.

Real runs read an ``ImageFolder`` (``--data-dir``: one subfolder per class) or, without
it, download CIFAR-10 into ``--download-dir``. ``--smoke`` makes images in-process that
a model learns in a few steps. Items are dicts (``pixel_values``, ``labels``); the
dataset has a ``num_classes`` attribute.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.utils.data import Dataset
from torchvision import datasets, transforms

# ImageNet statistics: the usual choice, and right for pretrained torchvision weights.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SMOKE_IMAGE_SIZE = 32
# Images up to this size (CIFAR's 32 px) are trained at their own size: cropped with
# padding, and the model gets a stem that keeps their resolution (see model.py).
SMALL_IMAGES = 64


class ImageClassification(Dataset):
    """Turns torchvision's ``(image, label)`` pairs into the training loop's dicts."""

    def __init__(self, images: Dataset, num_classes: int) -> None:
        self.images = images
        self.num_classes = num_classes

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        image, label = self.images[index]
        return {"pixel_values": image, "labels": torch.as_tensor(label)}


class SmokeImages(Dataset):
    """Noise over its class's own four-quadrant colouring: learnable in a few steps,
    unlike random labels. Seeded: the same images on every rank."""

    def __init__(self, num_samples: int, num_classes: int = 10, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        quadrants = torch.randn(num_classes, 3, 2, 2, generator=generator)
        half = SMOKE_IMAGE_SIZE // 2
        patterns = quadrants.repeat_interleave(half, 2).repeat_interleave(half, 3)
        self.labels = torch.randint(num_classes, (num_samples,), generator=generator)
        shape = (num_samples, 3, SMOKE_IMAGE_SIZE, SMOKE_IMAGE_SIZE)
        self.images = patterns[self.labels] + torch.randn(shape, generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], int(self.labels[index])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="ImageFolder root, one subfolder per class (default: CIFAR-10)",
    )
    parser.add_argument("--download-dir", type=Path, default=Path("data"))
    parser.add_argument(
        "--image-size", type=int, help="default: 32 for CIFAR-10, 224 with --data-dir"
    )
    parser.add_argument(
        "--pretrained",
        action="store_true",
        help="start from torchvision's ImageNet weights",
    )


def image_size(args: argparse.Namespace) -> int:
    """The side of the square images the model sees."""
    if args.smoke:
        return SMOKE_IMAGE_SIZE
    if args.image_size:
        return args.image_size
    return 224 if args.data_dir is not None else 32  # CIFAR-10 at its own 32 px


def train_transform(size: int) -> transforms.Compose:
    if size <= SMALL_IMAGES:  # CIFAR's augmentation: shifted up to an eighth, flipped
        crop = [transforms.Resize(size), transforms.RandomCrop(size, padding=size // 8)]
    else:
        crop = [transforms.RandomResizedCrop(size)]
    return transforms.Compose(
        crop
        + [
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )


def eval_transform(size: int) -> transforms.Compose:
    """Validation sees the whole image, resized and centred: no random augmentation."""
    resize = size if size <= SMALL_IMAGES else round(size * 256 / 224)  # a margin
    return transforms.Compose(
        [
            transforms.Resize(resize),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )


def prepare(args: argparse.Namespace) -> None:
    """Download by one process (one for all nodes where they share --download-dir,
    else one per node: torchvision's download is not safe to race). Offline (compute
    nodes often are), stop with one line that says what to pass instead."""
    if args.smoke or args.data_dir is not None:
        return
    try:
        datasets.CIFAR10(args.download_dir, train=True, download=True)
    except OSError as err:  # no network: URLError, socket errors
        raise SystemExit(
            f"CIFAR-10 could not be downloaded into {args.download_dir}/ ({err}): pass "
            "--data-dir with an image folder (one subfolder per class), or download it "
            "where there is network and copy it into --download-dir"
        ) from None


def prepared_dir(args: argparse.Namespace) -> Path:
    """Where prepare() writes: the ranks check whether every node sees it (then one
    process prepares it for all). --smoke prepares nothing; its checkpoints' folder
    stands in."""
    return args.checkpoint_dir if args.smoke else args.download_dir


def build_datasets(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """The same images twice: with training augmentation, and with the evaluation
    transform. The held-out split is made from them in evaluation.py."""
    return build_view(args, train=True), build_view(args, train=False)


def build_view(args: argparse.Namespace, train: bool) -> Dataset:
    if args.smoke:
        return ImageClassification(SmokeImages(args.smoke_samples), num_classes=10)
    transform = (train_transform if train else eval_transform)(image_size(args))
    if args.data_dir is not None:
        folder = datasets.ImageFolder(args.data_dir, transform=transform)
        return ImageClassification(folder, num_classes=len(folder.classes))
    cifar = datasets.CIFAR10(args.download_dir, train=True, transform=transform)
    return ImageClassification(cifar, num_classes=10)
