"""Each training DataLoader gets a DistributedSampler, so every process reads a different
shard; ``shuffle`` moves into the sampler, and ``sampler.set_epoch(epoch)`` at the top of the
epoch loop reshuffles each epoch (without it every epoch repeats the first one's order).

Evaluation loaders stay whole: every process evaluates the whole set with identical
parameters, so the metric is the single-process one, and only rank 0 prints it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from genie.convert.base import Context, Rewrite, calls, code, kwarg, stmt, walk
from genie.i18n import _

_EVAL = re.compile(r"val|test|eval|dev|holdout", re.IGNORECASE)
_LOOPS = (cst.For, cst.While)


@dataclass
class Loaders:
    train: dict[int, str] = field(default_factory=dict)  # DataLoader call id -> its name
    evaluation: list[str] = field(default_factory=list)
    todo: dict[int, str] = field(default_factory=dict)  # DataLoader call id -> why not
    epoch_loops: dict[int, list[str]] = field(default_factory=dict)  # For id -> loader names
    before_loop: dict[int, tuple[str, str]] = field(default_factory=dict)  # For -> name, epoch
    unsharded: set[int] = field(default_factory=set)  # training loops over other data
    batch: str | None = None  # the training loader's batch_size, as written


def _assignments(node: cst.CSTNode, loops: int = 0) -> list[tuple[str, cst.Call, int]]:
    """(name, DataLoader call, how many loops enclose it) for every ``name = DataLoader(...)``."""
    found = []
    for child in node.children:
        if isinstance(child, cst.Assign) and len(child.targets) == 1:
            value = child.value
            if isinstance(value, cst.Call) and calls(value, "DataLoader") == [value]:
                found.append((code(child.targets[0].target), value, loops))
        found += _assignments(child, loops + isinstance(child, _LOOPS))
    return found


def _shuffles(call: cst.Call) -> bool:
    arg = kwarg(call, "shuffle")
    return arg is not None and code(arg.value) not in ("False", "None", "0")


def find(module: cst.Module) -> Loaders:
    found = Loaders()
    assigned = _assignments(module)
    for name, call, loops in assigned:
        training = _shuffles(call) or "train" in name.lower()
        if not training and not _EVAL.search(name):
            training = not any(_shuffles(c) or "train" in n.lower() for n, c, _l in assigned)
        if not training:
            found.evaluation.append(name)
        elif loops:
            found.todo[id(call)] = _("{n} is built inside a loop: build it once, with a "
                                     "DistributedSampler, before the loop").format(n=name)  # fmt: skip
        elif kwarg(call, "sampler") or kwarg(call, "batch_sampler"):
            found.todo[id(call)] = _("{n} has its own sampler: make it shard by rank "
                                     "(see DistributedSampler)").format(n=name)  # fmt: skip
        else:
            found.train[id(call)] = name
            size = kwarg(call, "batch_size")
            found.batch = found.batch or (code(size.value) if size else "1")
    _find_epoch_loops(module, found)
    return found


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return any(
        isinstance(n, (cst.Name, cst.Attribute)) and code(n) == name for n in walk(node)
    )


def _epoch_name(node: cst.For) -> str | None:
    names = [n.value for n in walk(node.target) if isinstance(n, cst.Name)]
    return next((n for n in names if "epoch" in n.lower()), None)


def _find_epoch_loops(module: cst.Module, found: Loaders) -> None:
    loops = [n for n in walk(module) if isinstance(n, cst.For)]
    names = sorted(set(found.train.values()))
    for name in names:
        epoch_loops = [f for f in loops if _epoch_name(f) and _mentions(f.body, name)]
        for loop in epoch_loops:
            found.epoch_loops.setdefault(id(loop), []).append(name)
        if epoch_loops:
            continue
        for function in (n for n in walk(module) if isinstance(n, cst.FunctionDef)):
            params = [p.name.value for p in function.params.params]
            epoch = next((p for p in params if "epoch" in p.lower()), None)
            inner = [f for f in walk(function) if isinstance(f, cst.For)]
            for loop in inner:
                if epoch and _mentions(loop.iter, name):
                    found.before_loop[id(loop)] = (name, epoch)
    every = set(names) | set(found.evaluation)
    for loop in loops:
        nested = [n for n in walk(loop.body) if isinstance(n, _LOOPS)]
        if nested or not any(True for _c in _method(loop.body, "backward")):
            continue
        if not calls(loop.iter, "range") and not any(_mentions(loop.iter, n) for n in every):
            found.unsharded.add(id(loop))


def _method(node: cst.CSTNode, method: str) -> list[cst.Call]:
    return [
        n
        for n in walk(node)
        if isinstance(n, cst.Call)
        and isinstance(n.func, cst.Attribute)
        and n.func.attr.value == method
    ]


def _set_epoch(name: str, epoch: str) -> cst.BaseStatement:
    return stmt(f"{name}.sampler.set_epoch({epoch})\n")


class LoaderRewrite(Rewrite):
    def __init__(self, ctx: Context, loaders: Loaders) -> None:
        super().__init__(ctx)
        self.loaders = loaders

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if id(original) in self.loaders.todo:
            self.mark_todo(original, self.loaders.todo[id(original)])
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
        sampler = cst.Arg(
            cst.parse_expression(f"DistributedSampler({data}, shuffle={flag})"),
            keyword=cst.Name("sampler"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        args = [a for a in updated.args if a is not shuffle]
        self.ctx.uses.add("DistributedSampler")
        self.ctx.change(
            original,
            _("{n} gets a DistributedSampler: each process reads its own shard").format(n=name),
        )
        return updated.with_changes(args=[*args, sampler])

    def _dataset_name(self, loader: str) -> str:
        base = loader.rpartition(".")[2].replace("loader", "").strip("_")
        name = f"{base}_dataset" if base else "dataset"
        while name in self.ctx.facts.setdefault("names", set()):
            name += "_"
        self.ctx.facts["names"].add(name)
        return name

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        if id(original) in self.loaders.unsharded:
            self.mark_todo(
                original,
                _("this data is not from a DataLoader: every process trains on all of it "
                  "(correct, not faster); shard it, same number of batches per rank"),
            )  # fmt: skip
        if id(original) in self.loaders.before_loop:
            name, epoch = self.loaders.before_loop[id(original)]
            self.ctx.change(original, _("{n}.sampler.set_epoch({e})").format(n=name, e=epoch))
            self.insert_before(_set_epoch(name, epoch))
        names = self.loaders.epoch_loops.get(id(original))
        epoch = _epoch_name(original)
        if not names or epoch is None or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        lines = [_set_epoch(name, epoch) for name in names]
        for name in names:
            self.ctx.change(
                original, _("{n}.sampler.set_epoch({e}) each epoch").format(n=name, e=epoch)
            )
        body = updated.body.with_changes(body=[*lines, *updated.body.body])
        return updated.with_changes(body=body)
