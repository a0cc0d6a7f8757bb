"""Batches made by hand, without a DataLoader: each training loop (the innermost loop that
calls ``backward()``) must read something split across the processes.

A loop over a DataLoader (which gets a DistributedSampler) or over a plain list (``shard()``,
see :mod:`genie.convert.loaders`) is split already. A loop over batch indices,
``for i in range(0, data.size(0) - 1, bptt)`` or ``for i in range(n_batches)`` whose index
slices the data, becomes ``for i in shard(range(...))``: every WORLD_SIZE-th batch, the same
count on every process; a ``for`` or ``while`` loop that takes its batches with ``next()``
from a split loader is split too (not sharded again), and so is a loop that draws its
batches at random (each rank draws its own after the wrap, see :mod:`genie.convert.seeds`).
Any other training loop (a generator, a ``while``, full-batch training) is a TODO at its
line: every process would train on the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from genie.convert import seeds
from genie.convert.base import (
    Context,
    Rewrite,
    calls,
    code,
    current,
    dotted,
    method_calls,
    walk,
)
from genie.i18n import N_, _

_LOOPS = (cst.For, cst.While)
NOT_SPLIT = N_(
    "this training loop's batches are not split across processes: every process trains on "
    "the same data; use a DataLoader (genie gives it a DistributedSampler) or take every "
    "WORLD_SIZE-th batch (shard())"
)


@dataclass
class HandBatches:
    module: cst.Module
    drawn: bool = False  # a training loop draws its batches at random
    ranges: set[int] = field(default_factory=set)  # range(...) call ids to shard
    todo: set[int] = field(default_factory=set)  # training loops left unsplit


def find(module: cst.Module, split: set[str]) -> HandBatches:
    """``split``: the names of loaders and lists the other rewrites split already."""
    found = HandBatches(module)
    split = _derived(module, split | current().loaders)
    _visit(module, [], _derived(module, split | passed(module, split)), found)
    return found


def _derived(module: cst.Module, names: set[str]) -> set[str]:
    """``names`` and what is assigned from an expression using them (``tqdm(loader)``)."""
    names = set(names)
    assigns = [n for n in walk(module) if isinstance(n, cst.Assign) and len(n.targets) == 1]
    for _round in range(3):
        for node in assigns:
            if _names_in(code(node.value)) & names:
                names.add(code(node.targets[0].target))
    return names


def passed(module: cst.Module, split: set[str], strict: bool = False) -> set[str]:
    """Parameters of the script's functions (and classes' ``__init__``) that are given split
    data where they are called: ``def train(dataloader, ...)`` called as
    ``train(train_dataloader, ...)``, here or in another file of the program; ``strict``:
    given exactly one of the names ``split``, in this file."""
    functions = callables(module)
    given = fed(module, functions, split, strict)
    given |= set() if strict else current().fed
    return {param for function, param in given if function in functions}


def callables(module: cst.Module) -> dict[str, cst.FunctionDef]:
    """The module's functions by name, and each class's ``__init__`` by the class's name."""
    found = {n.name.value: n for n in walk(module) if isinstance(n, cst.FunctionDef)}
    for cls in (n for n in walk(module) if isinstance(n, cst.ClassDef)):
        init = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef)
                     and f.name.value == "__init__"), None)  # fmt: skip
        if init is not None:
            found[cls.name.value] = init
    return found


def fed(
    callers: cst.Module,
    functions: dict[str, cst.FunctionDef],
    split: set[str],
    strict: bool = False,
) -> set[tuple[str, str]]:
    """(function, parameter) of ``functions`` that ``callers`` call with ``split`` data (with
    what is made from it, unless ``strict``: only the names themselves)."""
    split = split if strict else _derived(callers, split)
    found = set()
    for call in (n for n in walk(callers) if isinstance(n, cst.Call)):
        name = code(call.func).rpartition(".")[2]
        function = functions.get(name)
        if function is None:
            continue
        params = [p.name.value for p in function.params.params]
        if params[:1] == ["self"]:
            params = params[1:]
        for position, arg in enumerate(call.args):
            if not (code(arg.value) in split if strict else _names_in(code(arg.value)) & split):
                continue
            if arg.keyword is not None:
                found.add((name, arg.keyword.value))
            elif position < len(params):
                found.add((name, params[position]))
    return found


def _visit(node: cst.CSTNode, iters: list[str], split: set[str], found: HandBatches) -> None:
    for child in node.children:
        inner = iters
        if isinstance(child, cst.For):
            inner = [*iters, code(child.iter)]
            if _trains(child) and not any(_trains(n) for n in _loops_below(child)):
                _judge(child, inner, split, found)
        elif isinstance(child, cst.While) and _trains(child):
            below = any(_trains(n) for n in _loops_below(child))
            drawn = not calls(child.body, "next") and _drawn(child, found)  # no other source
            taken = _reads(iters, split) or _next_of(child, split) or drawn
            if not below and not taken:
                found.todo.add(id(child))
            found.drawn = found.drawn or drawn
        _visit(child, inner, split, found)


def _loops_below(loop: cst.For | cst.While) -> list[cst.CSTNode]:
    return [n for n in walk(loop.body) if isinstance(n, _LOOPS)]


def _trains(loop: cst.CSTNode) -> bool:
    return isinstance(loop, _LOOPS) and bool(method_calls(loop.body, "backward"))


def _reads(iters: list[str], split: set[str]) -> bool:
    """Whether one of the enclosing loops' iterables is split data."""
    return any(_names_in(text) & split for text in iters)


def _drawn(loop: cst.For | cst.While, found: HandBatches) -> bool:
    """Whether a loop that reads no data draws (``torch.randn``, random indices, in the
    loop or a function it calls): its batches, then; after the wrap each rank draws its own
    (seed_each_rank)."""
    return bool(seeds.loop_draws(found.module, [loop]))


def _next_of(loop: cst.For | cst.While, split: set[str]) -> bool:
    """Whether the loop takes its batches with ``next()`` from split data (an endless
    ``while True`` over ``next(data_iter)``, ``data_iter = iter(train_loader)``; StarGAN's
    ``for i in range(start, num_iters)`` over ``next(data_iter)``, re-made when it ends)."""
    nexts = [c for c in calls(loop.body, "next") if c.args]
    return any(_names_in(code(c.args[0].value)) & split for c in nexts)


def _names_in(text: str) -> set[str]:
    tree = cst.parse_expression(text)
    return {code(n) for n in walk(tree) if isinstance(n, (cst.Name, cst.Attribute))}


def _judge(loop: cst.For, iters: list[str], split: set[str], found: HandBatches) -> None:
    if _reads(iters, split) or _next_of(loop, split):
        return  # a step loop taking its batches with next() from a split loader: not sharded
    indices = _batch_indices(loop)
    if indices is not None:
        found.ranges.add(id(indices))
    elif _counts(loop) and _drawn(loop, found):
        found.drawn = True
    else:
        found.todo.add(id(loop))


def _counts(loop: cst.For) -> bool:
    """Whether the loop only counts steps (``range(n)``, ``count(1)``), reading no data."""
    it = loop.iter
    return isinstance(it, cst.Call) and dotted(it.func).rpartition(".")[2] in ("range", "count")


def _batch_indices(loop: cst.For) -> cst.Call | None:
    """The ``range(...)`` of ``for i in range(...)`` or ``for n, i in enumerate(range(...))``
    when ``i`` indexes the data (a step, or ``i`` used in a subscript or call), not epochs."""
    ranges = [c for c in calls(loop.iter, "range") if c is loop.iter or _enumerated(loop, c)]
    if not ranges:
        return None
    target: cst.BaseExpression = loop.target
    if isinstance(target, cst.Tuple) and len(target.elements) == 2:
        target = target.elements[1].value
    if not isinstance(target, cst.Name) or "epoch" in target.value.lower():
        return None
    variable, call = target.value, ranges[0]
    if len(call.args) == 3 or _indexes(loop.body, variable):
        return call
    return None


def _enumerated(loop: cst.For, call: cst.Call) -> bool:
    it = loop.iter
    return isinstance(it, cst.Call) and code(it.func) == "enumerate" and it.args[0].value is call


def _indexes(body: cst.CSTNode, variable: str) -> bool:
    """``variable`` inside a subscript (``x[i:i + n]``) or as a call's argument."""
    for node in walk(body):
        args: list[cst.CSTNode] = []
        if isinstance(node, cst.Subscript):
            args = list(node.slice)
        elif isinstance(node, cst.Call):
            args = list(node.args)
        if any(isinstance(n, cst.Name) and n.value == variable for a in args for n in walk(a)):
            return True
    return False


class HandBatchRewrite(Rewrite):
    def __init__(self, ctx: Context, found: HandBatches) -> None:
        super().__init__(ctx)
        self.found = found

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if id(original) not in self.found.ranges:
            return updated
        self.ctx.uses.add("shard")
        self.ctx.change(
            original,
            _("batch indices: each process trains on every {w}-th batch (shard())").format(
                w="WORLD_SIZE"
            ),
        )
        return cst.Call(func=cst.Name("shard"), args=[cst.Arg(updated)])

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        if id(original) in self.found.todo:
            self.mark_todo(original, NOT_SPLIT)
        return updated

    def leave_While(self, original: cst.While, updated: cst.While) -> cst.While:
        if id(original) in self.found.todo:
            self.mark_todo(original, NOT_SPLIT)
        return updated


class Shard(cst.CSTTransformer):
    """``names`` -> ``shard(names)``: this rank's share of each list."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if updated.value in self.names:
            return cst.Call(func=cst.Name("shard"), args=[cst.Arg(updated)])
        return updated

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return False  # in ``x.batches`` the name is an attribute, not the list


def lists(module: cst.Module) -> set[str]:
    """Names bound to a list built in the script: ``batches = [... for ...]``."""
    found = set()
    for node in walk(module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            value = node.value
            built = isinstance(value, (cst.List, cst.ListComp)) or (
                isinstance(value, cst.Call) and dotted(value.func) in ("list", "torch.split")
            )
            if built:
                found.add(code(node.targets[0].target))
    return found
