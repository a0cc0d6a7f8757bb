"""Each training DataLoader gets a DistributedSampler, so every process reads a different
shard; ``shuffle`` moves into the sampler, and ``sampler.set_epoch(epoch)`` at the top of the
epoch loop reshuffles each epoch (without it every epoch repeats the first one's order).

Evaluation loaders stay whole: every process evaluates the whole set with identical
parameters, so the metric is the single-process one, and only rank 0 prints it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from genie.convert import batches, epochs, iterables, samplers
from genie.convert.base import (
    Context,
    Rewrite,
    calls,
    code,
    current,
    insert_arg,
    keyword_arg,
    kwarg,
    method_calls,
    stmt,
    walk,
)
from genie.i18n import N_, _

_EVAL = re.compile(r"val|test|eval|dev|holdout", re.IGNORECASE)
_LOOPS = (cst.For, cst.While)


@dataclass
class Loaders:
    train: dict[int, str] = field(default_factory=dict)  # DataLoader call id -> its name
    evaluation: list[str] = field(default_factory=list)
    todo: dict[int, tuple[str, str]] = field(default_factory=dict)  # call id -> (why not, name)
    # a with-replacement sampler's or an iterable's loader: call id -> (its rewrite, loader)
    own: dict[int, tuple[Callable, str]] = field(default_factory=dict)
    epoch_loops: dict[int, list[str]] = field(default_factory=dict)  # For id -> loader names
    before_loop: dict[int, tuple[str, str]] = field(default_factory=dict)  # For -> name, epoch
    remade: dict[int, str] = field(default_factory=dict)  # ``it = iter(loader)`` in training
    unsharded: dict[int, set[str]] = field(default_factory=dict)  # For id -> plain lists
    no_epoch: set[int] = field(default_factory=set)  # training loaders with no epoch loop
    batch: str | None = None  # the training loader's batch_size, as written


def _loader_calls(node: cst.CSTNode, loops: int = 0) -> list[tuple[str, cst.Call, int]]:
    """(name, DataLoader call, enclosing loops) for ``name = DataLoader(...)``, and for
    ``return DataLoader(...)`` with the function's name."""
    found = []
    for child in node.children:
        value, name = None, ""
        if isinstance(child, cst.Assign) and len(child.targets) == 1:
            value, name = child.value, code(child.targets[0].target)
        elif isinstance(child, cst.Return):
            value = child.value
        if isinstance(value, cst.Call) and calls(value, "DataLoader") == [value]:
            found.append((name, value, loops))
        if isinstance(child, cst.FunctionDef):
            found += [(n or child.name.value, c, d) for n, c, d in _loader_calls(child)]
        else:
            found += _loader_calls(child, loops + isinstance(child, _LOOPS))
    return found


def _shuffles(call: cst.Call) -> bool:
    arg = kwarg(call, "shuffle")
    return arg is not None and code(arg.value) not in ("False", "None", "0")


def _is_training(name: str, call: cst.Call, every: list[tuple[str, cst.Call, int]]) -> bool:
    """By name first (a shuffled test loader is still a test loader), then by shuffle."""
    if "train" in name.lower():
        return True
    if _EVAL.search(name):
        return False
    if _shuffles(call):
        return True
    return not any(
        "train" in n.lower() or _shuffles(c) and not _EVAL.search(n) for n, c, _l in every
    )


def find(module: cst.Module) -> Loaders:
    found = Loaders()
    every = _loader_calls(module)
    for name, call, loops in every:
        if not _is_training(name, call, every):
            found.evaluation.append(name)
        elif loops:
            found.todo[id(call)] = (N_("{n} is built inside a loop: build it once, with a "
                                       "DistributedSampler, before the loop"), name)  # fmt: skip
        elif (sampler := samplers.drawn(module, call)) is not None:
            found.own[id(sampler)] = (samplers.rewrite, name)
            found.batch = found.batch or _batch(call)
        elif iterables.dataset(module, call) is not None:
            found.own[id(call)] = (iterables.rewrite, name)
            found.batch = found.batch or _batch(call)
        elif kwarg(call, "sampler") or kwarg(call, "batch_sampler"):
            found.todo[id(call)] = (
                N_("{n} has its own sampler: make it shard by rank (see DistributedSampler)"),
                name,
            )
        else:
            found.train[id(call)] = name
            found.batch = found.batch or _batch(call)
            names = epochs.aliases(module, name)  # and the parameters it is handed to, by name
            handed = batches.passed(module, names, strict=True)
            names |= set().union(*(epochs.aliases(module, p) for p in handed))
            placed = epochs.find_epoch_loops(module, found, names)
            if not placed and name not in current().epoch_loaders:
                found.no_epoch.add(id(call))
    for name in sorted(current().loaders - set(found.train.values())):
        epochs.find_epoch_loops(module, found, {name})  # a loader another file builds, passed here
    for function, param in sorted(current().trained):
        scope = epochs.defined(module, function)
        if scope is not None:  # handed a training loader: ``self.loader = loader``, looped
            epochs.find_epoch_loops(scope, found, epochs.aliases(scope, param))
    _find_unsharded(module, found, {n for n, _c, _l in every})
    return found


def epoch_loaders(module: cst.Module, names: set[str]) -> set[str]:
    """Which of the training loaders ``names`` have an epoch loop in ``module``."""
    scratch = Loaders()  # where set_epoch would go: recorded, not wanted here
    return {n for n in names if epochs.find_epoch_loops(module, scratch, epochs.aliases(module, n))}


def _batch(call: cst.Call) -> str | None:
    """The loader's batch_size as written; None where a ``**`` may hold it."""
    size = kwarg(call, "batch_size")
    return code(size.value) if size else None if any(a.star == "**" for a in call.args) else "1"


def known_data(module: cst.Module) -> set[str]:
    """The names of every loader and list the rewrites split (or leave whole), and aliases."""
    names = {n for n, _c, _l in _loader_calls(module)} | batches.lists(module)
    return set().union(*(epochs.aliases(module, n) for n in names))


def _find_unsharded(module: cst.Module, found: Loaders, loaders: set[str]) -> None:
    """Innermost loops that call backward() on batches from a plain list."""
    lists = batches.lists(module)
    for loop in (n for n in walk(module) if isinstance(n, cst.For)):
        nested = [n for n in walk(loop.body) if isinstance(n, _LOOPS)]
        if nested or not method_calls(loop.body, "backward"):
            continue
        names = {name for name in lists - loaders if epochs.mentions(loop.iter, name)}
        if names:
            found.unsharded[id(loop)] = names


class LoaderRewrite(Rewrite):
    def __init__(self, ctx: Context, loaders: Loaders) -> None:
        super().__init__(ctx)
        self.loaders = loaders

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if id(original) in self.loaders.own:
            rewrite, loader = self.loaders.own[id(original)]
            return rewrite(self.ctx, original, updated, loader)
        if id(original) in self.loaders.todo:
            message, loader = self.loaders.todo[id(original)]
            self.mark_todo(original, message, n=loader)
            return updated
        name = self.loaders.train.get(id(original))
        if name is None:
            return updated
        shuffle = kwarg(updated, "shuffle")
        dataset = kwarg(updated, "dataset") or updated.args[0]
        data = code(dataset.value)
        if not isinstance(dataset.value, (cst.Name, cst.Attribute)):
            # the loader and its sampler must see the same dataset object: name it once
            data = self._dataset_name(name)
            self.insert_before(stmt(f"{data} = {code(dataset.value)}\n"))
            new = dataset.with_changes(value=cst.Name(data))
            updated = updated.with_changes(args=[new if a is dataset else a for a in updated.args])
        flag = code(shuffle.value) if shuffle else "False"
        args = [a for a in updated.args if a is not shuffle]
        spread = next((a for a in args if a.star == "**"), None)
        if shuffle is None and spread is not None:
            # shuffle may hide in the **kwargs: take it out before they are spread
            flag = f'{code(spread.value)}.pop("shuffle", False)'
        sampler = keyword_arg("sampler", f"DistributedSampler({data}, shuffle={flag})")
        insert_arg(args, args.index(spread) if spread is not None else len(args), sampler)
        if id(original) in self.loaders.no_epoch and shuffle is not None:
            self.mark_todo(
                original,
                N_(
                    "no epoch loop found: call {n}.sampler.set_epoch(epoch) at the start of "
                    "each epoch, or every epoch repeats the same order"
                ),
                n=name,
            )
        self.ctx.uses.add("DistributedSampler")
        self.ctx.change(
            original,
            _("{n} gets a DistributedSampler: each process reads its own shard").format(n=name),
        )
        return updated.with_changes(args=args)

    def _shard(self, original: cst.For, updated: cst.For, lists: set[str]) -> cst.For:
        """``for b in batches`` -> ``for b in shard(batches)``: this rank's share of a list."""
        self.ctx.uses.add("shard")
        self.ctx.change(
            original,
            _("{n}: each process trains on its share (shard(), the same count on each)").format(
                n=", ".join(sorted(lists))
            ),
        )
        return updated.with_changes(iter=updated.iter.visit(batches.Shard(lists)))

    def _dataset_name(self, loader: str) -> str:
        base = loader.rpartition(".")[2].replace("loader", "").strip("_")
        name = f"{base}_dataset" if base else "dataset"
        while name in self.ctx.facts.setdefault("names", set()):
            name += "_"
        self.ctx.facts["names"].add(name)
        return name

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        name = self.loaders.remade.get(id(original))
        if name is not None:
            epoch = f"{name}.sampler.epoch + 1"
            self.ctx.change(
                original,
                _("{n}.sampler.set_epoch({e}): each new iterator reads a new order").format(
                    n=name, e=epoch
                ),
            )
            self.insert_before(epochs.set_epoch(name, epoch))
        return updated

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        if id(original) in self.loaders.unsharded:
            updated = self._shard(original, updated, self.loaders.unsharded[id(original)])
        if id(original) in self.loaders.before_loop:
            name, variable = self.loaders.before_loop[id(original)]
            self.ctx.change(original, _("{n}.sampler.set_epoch({e})").format(n=name, e=variable))
            self.insert_before(epochs.set_epoch(name, variable))
        names = self.loaders.epoch_loops.get(id(original))
        epoch = epochs.epoch_name(original)
        if not names or epoch is None or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        lines = [epochs.set_epoch(name, epoch) for name in names]
        for name in names:
            self.ctx.change(
                original, _("{n}.sampler.set_epoch({e}) each epoch").format(n=name, e=epoch)
            )
        body = updated.body.with_changes(body=[*lines, *updated.body.body])
        return updated.with_changes(body=body)
