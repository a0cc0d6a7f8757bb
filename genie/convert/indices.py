"""What the convert probe learns from the DataLoader: the indices each batch was read from,
and which batches a process trained on (it ran ``backward()`` before the loader's next batch).
Every rank starts from one seed, so a loader left whole reads the same indices everywhere.
Imports torch only when installed, in the probe's process."""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import Any


class Loaders:
    """The training batches' indices, per loader (its sampler), on this rank."""

    def __init__(self, steps: Callable[[], int], most: int) -> None:
        self.steps = steps  # backward() calls so far
        self.most = most  # batches kept per loader
        self.runs: dict[int, list[str]] = {}  # sampler id -> digests of training batches
        # a DataLoader iterator's id -> (sampler id, its last batch's digest, steps then)
        self.last: dict[int, tuple[int, str, int]] = {}

    def training(self) -> list[list[str]]:
        """Each loader's training batches, the last read ones included."""
        for iterator in list(self.last):
            self.close(iterator)
        return [run for run in self.runs.values() if run]

    def close(self, iterator: int) -> None:
        """Keep the last batch ``iterator`` gave when the process trained on it since."""
        if iterator in self.last:
            sampler, digest, steps = self.last.pop(iterator)
            run = self.runs.setdefault(sampler, [])
            if self.steps() > steps and len(run) < self.most:
                run.append(digest)

    def read(self, iterator: Any, index: Any) -> None:
        """``iterator`` handed out the batch of ``index`` (None, or Nones: an iterable's)."""
        flat = index if isinstance(index, (list, tuple)) else [index]
        if index is not None and any(i is not None for i in flat):
            digest = hashlib.sha256(repr(index).encode()).hexdigest()
            self.last[id(iterator)] = (id(iterator._index_sampler), digest, self.steps())

    def install(self) -> None:
        """Hook the DataLoader's iterators: ``_next_index`` gives the indices (in the main
        process, in order, ahead of the batch when workers prefetch); ``__next__`` hands out
        the oldest. Evaluation batches (no backward() after them) are not kept."""
        from torch.utils.data import dataloader

        base = dataloader._BaseDataLoaderIter
        if not all(hasattr(base, n) for n in ("_next_index", "_reset")):
            return  # a torch whose DataLoader is built otherwise: the inputs' hashes judge
        next_index, next_batch, reset = base._next_index, base.__next__, base._reset
        watch = self

        def pending(it: Any) -> Any:
            return it.__dict__.setdefault("_genie_pending", deque())

        def watched_next_index(it: Any) -> Any:
            index = next_index(it)
            pending(it).append(index)
            return index

        def watched_reset(it: Any, *args: Any, **kwargs: Any) -> Any:
            pending(it).clear()
            return reset(it, *args, **kwargs)

        def watched_next(it: Any) -> Any:
            watch.close(id(it))
            batch = next_batch(it)
            queue = pending(it)
            watch.read(it, queue.popleft() if queue else None)
            return batch

        base._next_index = watched_next_index  # type: ignore[method-assign]
        base._reset = watched_reset  # type: ignore[method-assign,assignment]
        base.__next__ = watched_next  # type: ignore[method-assign,assignment]


def same_seed_everywhere(seed: int) -> None:
    """``seed`` in torch, random and NumPy, on every rank, as a script that seeds would."""
    import random

    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)
