"""A training loader over an ``IterableDataset`` (a class of the script's that subclasses it,
or ``load_dataset(..., streaming=True)``) cannot take a sampler: DataLoader refuses one. Its
dataset is wrapped instead, ``RankShard(dataset)``: of every WORLD_SIZE items in a row each
process keeps the RANK-th, so the processes read disjoint shares of the stream, and an
incomplete last group is dropped, so every process gets the same count (one with a batch
more would wait for the others forever at the end). Every process still reads the whole
stream; a dataset that knows how to read only its own part (files split by rank) does better.
"""

from __future__ import annotations

import libcst as cst

from genie.convert.base import Context, assigned_once, code, dotted, kwarg, walk
from genie.i18n import _

HELPER = '''

class RankShard(torch.utils.data.IterableDataset):
    """This process's share of an iterable dataset: of every WORLD_SIZE items in a row,
    the RANK-th; an incomplete last group is dropped (every process, the same count)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:  # where the dataset has a length
        return len(self.dataset) // WORLD_SIZE

    def __iter__(self):
        group = []
        for item in self.dataset:
            group.append(item)
            if len(group) == WORLD_SIZE:
                yield group[RANK]
                group = []
'''


def _iterable_classes(module: cst.Module) -> set[str]:
    """The script's classes that subclass IterableDataset (or one of those)."""
    classes = [n for n in walk(module) if isinstance(n, cst.ClassDef)]
    found: set[str] = set()
    while True:
        more = {
            node.name.value
            for node in classes
            if {dotted(b.value).rpartition(".")[2] for b in node.bases}
            & (found | {"IterableDataset"})
        }
        if more <= found:
            return found
        found |= more


def _streams(value: cst.BaseExpression, classes: set[str]) -> bool:
    """A call of an iterable class, or ``load_dataset(..., streaming=True)``, also at the
    root of ``[...]`` and method calls (``load_dataset(...)["train"].shuffle(...)``)."""
    while True:
        if isinstance(value, cst.Call):
            if dotted(value.func).rpartition(".")[2] in classes:
                return True
            streaming = kwarg(value, "streaming")
            if streaming is not None and code(streaming.value) == "True":
                return True
            if not isinstance(value.func, cst.Attribute):
                return False
            value = value.func.value
        elif isinstance(value, cst.Subscript):
            value = value.value
        else:
            return False


def dataset(module: cst.Module, loader: cst.Call) -> cst.Arg | None:
    """The dataset argument of DataLoader ``loader`` when it is iterable (built there, or
    assigned once to the name given)."""
    given = kwarg(loader, "dataset") or next((a for a in loader.args if a.keyword is None), None)
    if given is None or given.star:
        return None
    value = assigned_once(module, given.value)
    return given if _streams(value, _iterable_classes(module)) else None


def rewrite(ctx: Context, original: cst.Call, updated: cst.Call, loader: str) -> cst.Call:
    """``DataLoader(stream, ...)`` -> ``DataLoader(RankShard(stream), ...)``."""
    given = kwarg(updated, "dataset") or next(a for a in updated.args if a.keyword is None)
    shared = cst.Call(func=cst.Name("RankShard"), args=[cst.Arg(given.value)])
    args = [a.with_changes(value=shared) if a is given else a for a in updated.args]
    ctx.uses.add("RankShard")
    ctx.change(
        original,
        _(
            "{n} reads an iterable dataset: each process keeps every WORLD_SIZE-th item "
            "(RankShard), the same count on each"
        ).format(n=loader),
    )
    return updated.with_changes(args=args)
