"""Decisions every process must share. An ``if`` whose branch holds a collective (a
``dist.barrier()``, such as the one genie puts after rank 0 writes a file) or stops a loop that
trains (early stopping: DDP's next step is a collective too) must be taken by every process or
by none; its condition often is not the same on every rank (a loss on this rank's shard, a
best-so-far choice). Its test becomes ``same_on_every_rank(test)``: rank 0's decision,
broadcast, so every process takes the same branch. A test about the rank itself is left alone.
"""

from __future__ import annotations

import libcst as cst

from genie.convert.base import (
    LOCAL_RANK,
    RANK,
    Context,
    Rewrite,
    code,
    dotted,
    method_calls,
    walk,
)
from genie.i18n import _

HELPER = "same_on_every_rank"
COLLECTIVES = (
    "barrier", "all_reduce", "broadcast", "all_gather", "all_gather_object", "reduce",
    "broadcast_object_list", "gather", "scatter", "reduce_scatter", "all_to_all",
)  # fmt: skip
CODE = '''

def same_on_every_rank(decision: object) -> bool:
    """Rank 0's ``decision``, taken by every process: a branch that holds a collective (a
    barrier, the next training step) must be entered by all processes or by none."""
    flag = torch.tensor([1 if decision else 0], device=DEVICE)
    dist.broadcast(flag, src=0)
    return bool(flag.item())
'''


def _collective(node: cst.CSTNode) -> bool:
    name = dotted(node.func) if isinstance(node, cst.Call) else ""
    return name.startswith("dist.") and name.split(".")[-1] in COLLECTIVES


class _Inside(cst.CSTVisitor):
    """Whether a branch holds a collective, or a ``break`` of a loop that trains."""

    def __init__(self, training: bool) -> None:
        self.training = training
        self.found = False
        self.loops = 0

    def visit_Call(self, node: cst.Call) -> None:
        self.found = self.found or _collective(node)

    def visit_Break(self, node: cst.Break) -> None:
        self.found = self.found or (self.training and self.loops == 0)

    def visit_For(self, node: cst.For) -> None:
        self.loops += 1

    def leave_For(self, original: cst.For) -> None:
        self.loops -= 1

    def visit_While(self, node: cst.While) -> None:
        self.loops += 1

    def leave_While(self, original: cst.While) -> None:
        self.loops -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


class DecisionRewrite(Rewrite):
    def __init__(self, ctx: Context, trainers: set[str]) -> None:
        super().__init__(ctx)
        self.trainers = trainers  # the script's functions and classes that train
        self.loops: list[bool] = []  # for each enclosing loop: does it train?
        self.guards = 0  # enclosing ``if RANK == 0:`` (no collective may run there)

    def visit_If(self, node: cst.If) -> None:
        self.guards += _about_rank(node)

    def visit_For(self, node: cst.For) -> None:
        self.loops.append(self._trains(node))

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        self.loops.pop()
        return updated

    def visit_While(self, node: cst.While) -> None:
        self.loops.append(self._trains(node))

    def leave_While(self, original: cst.While, updated: cst.While) -> cst.While:
        self.loops.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.loops.append(False)  # a break inside belongs to the function's own loops

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        self.loops.pop()
        return updated

    def _trains(self, loop: cst.For | cst.While) -> bool:
        if method_calls(loop.body, "backward"):
            return True
        called = {dotted(n.func).rpartition(".")[2] for n in _calls(loop.body)}
        return bool(called & self.trainers)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self.guards -= _about_rank(original)
        if self.guards or _about_rank(original):
            return updated
        inside = _Inside(bool(self.loops) and self.loops[-1])
        original.body.visit(inside)
        if not inside.found:
            return updated
        self.ctx.uses.add(HELPER)
        self.ctx.change(
            original,
            _(
                "the condition is rank 0's, shared by every process ({h}): its branch holds a "
                "barrier or stops training, which all processes must do together"
            ).format(h=HELPER),
        )
        shared = cst.Call(func=cst.Name(HELPER), args=[cst.Arg(updated.test)])
        return updated.with_changes(test=shared)


def _about_rank(node: cst.If) -> bool:
    test = code(node.test)
    return RANK in test or LOCAL_RANK in test or HELPER in test


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in walk(node) if isinstance(n, cst.Call)]
