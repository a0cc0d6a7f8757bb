"""What ``genie convert`` tells the user: each changed line of each file, numbered, then the
batch, the seeds and the evaluation as they are after the conversion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from genie.i18n import N_, _

if TYPE_CHECKING:
    from genie.convert import Conversion

__all__ = ["Change", "report"]


@dataclass(frozen=True)
class Change:
    line: int  # in the original script
    what: str
    todo: bool = False  # something genie could not convert safely: the user must look


# What the report says of the script's seeds, where it sets none or a random one
SEEDS = {
    "random": N_(
        "Seeds: the script seeds from random numbers, so each process builds different "
        "initial weights; DDP broadcasts rank 0's weights when it wraps each model after its "
        "last initialisation or load, so every process starts from the same weights."
    ),
    "none": N_(
        "Seeds: the script sets no seed, so every process takes rank 0's random seed when it "
        "joins the process group (shared_seed()): what it draws with torch from there on "
        "(synthetic data, targets, initial weights) is the same on every process, not what "
        "it draws with NumPy or random, nor at import above the main block."
    ),
}


def _numbered(changes: tuple[Change, ...], script: str, start: int = 0) -> list[str]:
    """One numbered line per line of ``script`` that changed."""
    merged: dict[tuple[int, bool], list[str]] = {}
    for change in changes:
        whats = merged.setdefault((change.line, change.todo), [])
        if change.what not in whats:
            whats.append(change.what)
    out = []
    for number, ((line, todo), whats) in enumerate(merged.items(), start + 1):
        mark = "TODO " if todo else ""
        where = _("line {n}").format(n=line) if line else script
        out.append(f"{number:>3}. {mark}{where}: " + "; ".join(whats))
    return out


def report(conversion: Conversion, script: str, nproc: int, nodes: int = 1) -> list[str]:
    """The numbered list of changes (lines of ``script``), then what the user should know."""
    out = _numbered(conversion.changes, script)
    count = len(out)
    for local, copy in conversion.modules:
        out.append(
            _("{m}, written as {c} (genie's copy; {m} is not changed):").format(
                m=local.label, c=local.copy_path.name
            )
        )
        lines = _numbered(copy.changes, local.label, count)
        out, count = out + lines, count + len(lines)
    for label in conversion.left:
        out.append(
            _(
                "{m}: left as it is: it holds no training, only prints or file writes, "
                "which then happen on every process"
            ).format(m=label)
        )
    world = nproc * nodes
    if not conversion.split:
        out.append(
            _(
                "Batch: genie split no training data across the processes (see the TODOs): "
                "until it is, all {w} processes train on the same batches."
            ).format(w=world)
        )
    elif conversion.batch is None:
        out.append(
            _(
                "Batch: each process keeps its batch size, so {w} processes train on {w} times "
                "the batch per step; the learning rate is unchanged: consider scaling it "
                "(linearly, with warmup) or dividing the per-process batch by {w}."
            ).format(w=world)
        )
    else:
        out.append(
            _(
                "Batch: {b} per process, so {w} processes train on a global batch of {w} x {b} "
                "per step; the learning rate is unchanged: if it was tuned for batch {b}, "
                "consider scaling it (linearly, with warmup) or keeping the global batch by "
                "dividing the per-process batch by {w}."
            ).format(b=conversion.batch, w=world)
        )
    if conversion.seeds != "fixed":
        out.append(_(SEEDS[conversion.seeds]))
    for name in conversion.evaluation:
        out.append(
            _(
                "Evaluation: {n} is left whole: every process evaluates all of it with the same "
                "parameters (the single-process metric); rank 0 prints it."
            ).format(n=name)
        )
    return out
