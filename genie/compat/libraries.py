"""The libraries a project pins beside torch: release lines of Lightning, transformers,
accelerate and datasets with what each needs, and the requirements a project gets.

Facts and their sources: ``shared/reference/pytorch-compat.md`` (sections 6-9).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from genie.compat.torch import Version, features, format_minor, parse_minor, release
from genie.registry import FRAMEWORKS, TASKS


@dataclass(frozen=True)
class LibraryLine:
    """A release line of a library and what it needs (reference sections 6-9)."""

    package: str
    version: Version  # first release of the line, e.g. (5, 23)
    torch_min: Version
    python_min: Version


# Newest first. A project pins the newest line its torch and Python allow, up to the next line.
LIBRARY_LINES: dict[str, tuple[LibraryLine, ...]] = {
    "lightning": (
        LibraryLine("lightning", (2, 6), (2, 1), (3, 10)),
        LibraryLine("lightning", (2, 5), (2, 1), (3, 9)),
        LibraryLine("lightning", (2, 4), (2, 1), (3, 8)),
        LibraryLine("lightning", (2, 3), (2, 0), (3, 8)),
        LibraryLine("lightning", (2, 2), (1, 13), (3, 8)),
    ),
    "transformers": (
        LibraryLine("transformers", (5, 23), (2, 6), (3, 11)),
        LibraryLine("transformers", (5, 20), (2, 6), (3, 10)),
        LibraryLine("transformers", (5, 15), (2, 5), (3, 10)),
        # 5.5-5.9 need the same torch and Python as 5.10, but 5.10 changed the FSDP API
        # (LIBRARY_FEATURES): a pin must not straddle it.
        LibraryLine("transformers", (5, 10), (2, 4), (3, 10)),
        LibraryLine("transformers", (5, 0), (2, 2), (3, 10)),
        LibraryLine("transformers", (4, 56), (2, 2), (3, 9)),
        LibraryLine("transformers", (4, 53), (2, 1), (3, 9)),
        LibraryLine("transformers", (4, 49), (2, 0), (3, 9)),
        LibraryLine("transformers", (4, 41), (1, 10), (3, 8)),
    ),
    "accelerate": (
        LibraryLine("accelerate", (1, 11), (2, 0), (3, 10)),
        LibraryLine("accelerate", (1, 3), (2, 0), (3, 9)),
        LibraryLine("accelerate", (0, 21), (1, 10), (3, 8)),
    ),
    "datasets": (
        LibraryLine("datasets", (5, 0), (1, 0), (3, 10)),
        LibraryLine("datasets", (4, 6), (1, 0), (3, 10)),
        LibraryLine("datasets", (3, 2), (1, 0), (3, 9)),
        LibraryLine("datasets", (2, 14), (1, 0), (3, 8)),
    ),
}

# First release of a library line whose API the generated code writes differently, by
# the line requirements.txt pins (a pin never straddles one of these).
LIBRARY_FEATURES: dict[str, tuple[str, Version]] = {
    # TrainingArguments(fsdp=True, fsdp_config={...}) with FSDP2 by default; a string
    # ("full_shard auto_wrap") is deprecated from 5.10 (measured in the 5.9 and 5.10 wheels).
    "hf_fsdp_config": ("transformers", (5, 10)),
    # from_pretrained/from_config(dtype=...); torch_dtype before (transformers PR #39782)
    "hf_dtype": ("transformers", (4, 56)),
    # Trainer(processing_class=...), renamed from tokenizer=... in 4.46: the 4.41 line
    # (to 4.48) keeps tokenizer=
    "hf_processing_class": ("transformers", (4, 49)),
}


def library_features(torch: str, python: str) -> dict[str, bool]:
    """Feature gates for the library lines a project on this torch and Python pins."""
    gates = {}
    for name, (package, first) in LIBRARY_FEATURES.items():
        try:
            gates[name] = library_line(package, torch, python)[0].version >= first
        except LookupError:  # no line fits: the project does not use the package
            gates[name] = False
    return gates


# Every train.py imports tqdm: the plain loops draw their bar with it, and every
# framework's log lines go above its bar through tqdm.write (logging_redirect_tqdm).
PROGRESS_PACKAGE = ("tqdm", "tqdm>=4.64")

# Experiment trackers: the package (and its import name) a generated project needs, with
# the oldest release whose API it uses. Only the chosen one goes into requirements.txt.
TRACKER_PACKAGES: dict[str, tuple[str, str] | None] = {
    "tensorboard": ("tensorboard", "tensorboard>=2.10"),
    "wandb": ("wandb", "wandb>=0.15"),
    "mlflow": ("mlflow", "mlflow>=2.0"),
    "none": None,
}


def packages(framework: str, task: str, tracker: str = "none") -> tuple[str, ...]:
    """Import names a project needs besides torch (what the smoke test checks first)."""
    names = [*FRAMEWORKS[framework].packages, *TASKS[task].packages, PROGRESS_PACKAGE[0]]
    chosen = TRACKER_PACKAGES[tracker]
    if chosen:
        names.append(chosen[0])
    return tuple(dict.fromkeys(names))


def library_line(package: str, torch: str, python: str) -> tuple[LibraryLine, Version | None]:
    """The newest line of ``package`` for this torch and Python, and the next line (its cap)."""
    lines = LIBRARY_LINES[package]
    t, py = parse_minor(torch), parse_minor(python)
    for i, line in enumerate(lines):
        if line.torch_min <= t and line.python_min <= py:
            return line, lines[i - 1].version if i else None
    raise LookupError(f"no {package} release supports torch {torch} on Python {python}")


def requirements(
    minor: str,
    python: str = "3.11",
    framework: str = "ddp",
    task: str = "custom",
    tracker: str = "none",
) -> list[str]:
    """Pinned requirement lines for a generated project on torch ``minor``."""
    major, minor_no = parse_minor(minor)
    lines = [f"torch>={major}.{minor_no},<{major}.{minor_no + 1}"]
    packages = dict.fromkeys(FRAMEWORKS[framework].packages + TASKS[task].packages)
    if "torchvision" in packages:
        tv_major, tv_minor = parse_minor(release(minor).torchvision)
        lines.append(f"torchvision>={tv_major}.{tv_minor},<{tv_major}.{tv_minor + 1}")
    for package in packages:
        if package == "torchvision":
            continue
        line, cap = library_line(package, minor, python)
        upper = f"<{format_minor(cap)}" if cap else f"<{line.version[0] + 1}"
        lines.append(f"{package}>={format_minor(line.version)},{upper}")
    lines.append(PROGRESS_PACKAGE[1])
    chosen = TRACKER_PACKAGES[tracker]
    if chosen:
        lines.append(chosen[1])
        if tracker == "tensorboard" and not features(minor)["tensorboard_without_six"]:
            lines.append("six")  # torch 1.13's SummaryWriter imports it (measured)
    if not features(minor)["numpy2"]:
        lines.append("numpy<2")
    return lines


# Built against one torch release: the cluster's pins, kept in a file of their own so that a
# machine with another torch (the laptop that made the project) can install the rest.
TORCH_FAMILY = ("torch", "torchvision")
REQUIREMENTS, TORCH_REQUIREMENTS = "requirements.txt", "requirements-torch.txt"
# The project's own tests (tests/), kept apart from what training needs.
TEST_REQUIREMENTS, TEST_LINES = "requirements-test.txt", ("pytest>=7",)


def split_torch(lines: list[str]) -> tuple[list[str], list[str]]:
    """``requirements()`` lines as (the torch family's, the rest)."""
    family = [x for x in lines if re.split(r"[<>=!~;\[ ]", x, maxsplit=1)[0] in TORCH_FAMILY]
    return family, [x for x in lines if x not in family]


def install_command(project: Path | None = None, torch: bool = True) -> str:
    """The pip line for a project's requirements: with its torch pins (the cluster's), or
    without them, keeping the torch installed; its files by path when ``project`` is given."""
    names = [TORCH_REQUIREMENTS, REQUIREMENTS] if torch else [REQUIREMENTS]
    paths = [shlex.quote(str(project / n)) if project else n for n in names]
    return "pip install " + " ".join(f"-r {p}" for p in paths)
