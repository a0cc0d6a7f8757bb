"""Offline stand-ins for the datasets the third-party scripts download or read, written
where each script looks for them (the scripts themselves are kept verbatim).

    python fake_data.py mnist ROOT      # ROOT/MNIST/raw/*-idx?-ubyte, as torchvision reads them
    python fake_data.py wikitext DIR    # DIR/{train,valid,test}.txt
    python fake_data.py images DIR      # DIR/{train,test}/{pizza,steak,sushi}/*.png
    python fake_data.py shakespeare DIR # DIR/input.txt
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

import torch


def mnist(root: Path, train: int = 256, test: int = 128) -> None:
    """Tiny MNIST files: noise with a bright bar whose place is the label (learnable).
    The test split holds 128, one full batch of vae's fixed test batch size."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for prefix, count in (("train", train), ("t10k", test)):
        labels = torch.randint(0, 10, (count,), generator=g, dtype=torch.uint8)
        images = torch.randint(0, 96, (count, 28, 28), generator=g, dtype=torch.uint8)
        for i, label in enumerate(labels.tolist()):
            row, col = 4 + 10 * (label // 5), 2 + 5 * (label % 5)
            images[i, row : row + 8, col : col + 4] = 255
        header = struct.pack(">IIII", 2051, count, 28, 28)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.numpy().tobytes())
        header = struct.pack(">II", 2049, count)
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + labels.numpy().tobytes())


def wikitext(folder: Path) -> None:
    """Lines of 8 words counting up from a random start in a 50-word vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(50)]
    for name, lines in (("train", 400), ("valid", 60), ("test", 60)):
        starts = [rng.randrange(50) for _ in range(lines)]
        text = "".join(" ".join(words[(s + k) % 50] for k in range(8)) + "\n" for s in starts)
        (folder / f"{name}.txt").write_text(text)


def images(root: Path, train: int = 16, test: int = 8) -> None:
    """ImageFolder trees, as torchvision reads them: 64x64 noise tinted by class, one colour
    channel brighter per class (learnable)."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for split, count in (("train", train), ("test", test)):
        for label, name in enumerate(("pizza", "steak", "sushi")):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = torch.randint(0, 128, (64, 64, 3), generator=g, dtype=torch.uint8)
                pixels[:, :, label] += 127
                Image.fromarray(pixels.numpy()).save(folder / f"{i}.png")


def shakespeare(folder: Path) -> None:
    """input.txt: lines of a few words in a small alphabet, a text a char model can learn."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "my", "lord"]
    lines = (" ".join(rng.choice(words) for _ in range(8)) + "\n" for _ in range(300))
    # chargpt samples from the prompt "O God, O God!": every character of it is in the text
    (folder / "input.txt").write_text("O God, O God!\n" + "".join(lines))


if __name__ == "__main__":
    kinds = {"mnist": mnist, "wikitext": wikitext, "images": images}
    {**kinds, "shakespeare": shakespeare}[sys.argv[1]](Path(sys.argv[2]))
