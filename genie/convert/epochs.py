"""Where each training loader's ``sampler.set_epoch`` goes, so every epoch reads a new order
(the same on every rank): the top of an epoch loop that uses the loader, before a loop over
it in a function given the epoch, or, with neither, before each iterator a training loop
makes anew (``data_iter = iter(loader)`` when the last one ended). Names, not data flow."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from genie.convert.base import calls, code, dotted, method_calls, stmt, walk

if TYPE_CHECKING:
    from genie.convert.loaders import Loaders

_LOOPS = (cst.For, cst.While)


def aliases(module: cst.CSTNode, name: str) -> set[str]:
    """``name`` and what is assigned from it: ``x = name``, ``x = name(...)``, ``self.x = x``."""
    names = {name}
    assigns = [n for n in walk(module) if isinstance(n, cst.Assign) and len(n.targets) == 1]
    for _round in range(3):
        for node in assigns:
            value = node.value.func if isinstance(node.value, cst.Call) else node.value
            if isinstance(value, (cst.Name, cst.Attribute)) and code(value) in names:
                names.add(code(node.targets[0].target))
    return names


def defined(module: cst.Module, name: str) -> cst.ClassDef | cst.FunctionDef | None:
    """The class (its methods see ``self.x``) or function ``name`` defined in ``module``."""
    found = [n for n in walk(module) if isinstance(n, (cst.ClassDef, cst.FunctionDef))]
    return next((n for n in found if n.name.value == name), None)


def mentions(node: cst.CSTNode, name: str) -> bool:
    """Whether ``node`` uses ``name`` (``loader`` in ``self.loader`` or in ``f(loader=x)``
    is not ``loader``)."""
    attrs = {id(n.attr) for n in walk(node) if isinstance(n, cst.Attribute)}
    attrs |= {id(n.keyword) for n in walk(node) if isinstance(n, cst.Arg) and n.keyword}
    return any(
        isinstance(n, (cst.Name, cst.Attribute)) and code(n) == name and id(n) not in attrs
        for n in walk(node)
    )


def epoch_name(node: cst.For) -> str | None:
    """The loop variable of an epoch loop: ``for epoch in ...`` or ``for t in range(...)``."""
    names = [n.value for n in walk(node.target) if isinstance(n, cst.Name)]
    named = next((n for n in names if "epoch" in n.lower()), None)
    if named is None and isinstance(node.target, cst.Name) and calls(node.iter, "range"):
        return node.target.value
    return named


def find_epoch_loops(module: cst.CSTNode, found: Loaders, names: set[str]) -> bool:
    """Where ``set_epoch`` goes for a loader known by ``names``; False when nowhere."""
    loops = [n for n in walk(module) if isinstance(n, cst.For)]
    placed = False
    for name in sorted(names):
        for loop in loops:
            if epoch_name(loop) and mentions(loop.body, name) and not mentions(loop.iter, name):
                names_here = found.epoch_loops.setdefault(id(loop), [])
                if name not in names_here:
                    names_here.append(name)
                placed = True
    if placed:
        return True
    for function in (n for n in walk(module) if isinstance(n, cst.FunctionDef)):
        params = [p.name.value for p in function.params.params]
        epoch = next((p for p in params if "epoch" in p.lower()), None)
        for loop in (f for f in walk(function) if isinstance(f, cst.For)):
            iterated = next((n for n in sorted(names) if mentions(loop.iter, n)), None)
            if epoch and iterated:
                found.before_loop[id(loop)] = (iterated, epoch)
                placed = True
    return placed or find_remade(module, found, names)


def find_remade(module: cst.CSTNode, found: Loaders, names: set[str]) -> bool:
    """With no epoch loop: ``data_iter = iter(loader)`` inside a training loop (an endless
    ``while True`` that makes a new iterator when one ends) starts the loader's next epoch."""
    placed = False
    for loop in (n for n in walk(module) if isinstance(n, _LOOPS)):
        if not method_calls(loop.body, "backward"):
            continue
        for node in walk(loop.body):
            if not (isinstance(node, cst.Assign) and isinstance(node.value, cst.Call)):
                continue
            args = node.value.args
            made = dotted(node.value.func) == "iter" and len(args) == 1
            if made and code(args[0].value) in names:
                found.remade[id(node)] = code(args[0].value)
                placed = True
    return placed


def set_epoch(name: str, epoch: str) -> cst.BaseStatement:
    return stmt(f"{name}.sampler.set_epoch({epoch})\n")
