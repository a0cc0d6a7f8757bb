"""Rank 0 alone prints progress, logs and writes files; the others wait at a barrier where
the script later reads what was written, and progress bars show on rank 0 only."""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

import libcst as cst

from genie.convert.base import (
    RANK,
    Context,
    Rewrite,
    calls,
    code,
    dotted,
    expr,
    keyword_arg,
    kwarg,
    stmt,
    walk,
)
from genie.i18n import _

PRINTS = ("print", "pprint", "tqdm.write", "pbar.write")
LOG_METHODS = ("debug", "info", "warning", "warn", "log", "exception", "critical")
LOGGERS = ("logging", "logger", "log", "LOGGER", "LOG", "_logger")
WRITERS = (
    "torch.save", "save_checkpoint", "savefig", "np.save", "numpy.save", "json.dump",
    "save_image", "torchvision.utils.save_image", "vutils.save_image",
)  # fmt: skip
WRITE_METHODS = ("write_text", "write_bytes", "add_scalar", "add_scalars", "flush")
WRITE_MODES = ("w", "a", "x")


def _is_print(call: cst.Call) -> bool:
    name = dotted(call.func)
    if name in PRINTS or name.endswith(".write") and "tqdm" in name:
        return True
    head, _dot, method = name.rpartition(".")
    return method in LOG_METHODS and head.split(".")[-1] in LOGGERS


def _is_write(call: cst.Call) -> bool:
    name = dotted(call.func)
    method = name.rpartition(".")[2]
    return name in WRITERS or method in ("savefig", "save_image") or method in WRITE_METHODS


def _mode(call: cst.Call) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "mode":
            return arg.value
    positional = [a for a in call.args if a.keyword is None]
    return positional[1].value if len(positional) > 1 else None


def _opens_for_writing(node: cst.With) -> bool:
    for item in node.items:
        for call in calls(item.item, "open"):
            mode = _mode(call)
            if isinstance(mode, cst.SimpleString) and set(mode.value) & set(WRITE_MODES):
                return True
    return False


LOGGER_FACTORIES = ("SummaryWriter", "wandb.init")


def loggers(module: cst.Module) -> set[str]:
    """Names bound to an experiment logger: ``writer = SummaryWriter()``, ``run = wandb.init()``."""
    found = set()
    for node in walk(module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            value = node.value
            if isinstance(value, cst.Call) and calls(value, *LOGGER_FACTORIES) == [value]:
                found.add(code(node.targets[0].target))
    return found


def reads_files(module: cst.Module) -> bool:
    """Whether the script reads back a file (a checkpoint) it may have written."""
    return bool(calls(module, "torch.load", "load_checkpoint"))


class Rank0Rewrite(Rewrite):
    def __init__(self, ctx: Context, barrier: bool, loggers: Set[str] = frozenset()) -> None:
        super().__init__(ctx)
        self.barrier = barrier
        self.loggers = loggers
        self._inside: list[cst.CSTNode] = []  # the statement that runs on rank 0 only

    def on_visit(self, node: cst.CSTNode) -> bool:
        result = super().on_visit(node)
        if self._is_statement(node) and not self._inside:
            kind = self._kind(node)
            if kind is not None:
                self.guard_here()
                self._record(node, kind)
                self._inside.append(node)
        return result

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        if self._inside and self._inside[-1] is original:
            self._inside.pop()
            if self.barrier and self._kind(original) == "write":
                self.insert_after(stmt("dist.barrier()\n"))
                self.ctx.uses.add("barrier")
        return super().on_leave(original, updated)

    def _kind(self, node: cst.CSTNode) -> str | None:
        if isinstance(node, cst.With) and _opens_for_writing(node):
            return "write"
        if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
            return None
        small = node.body[0]
        if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
            return None
        if _is_print(small.value):
            return "print" if not self._runs_script_code(small.value) else None
        if self._logs(small.value):
            return "log"
        return "write" if _is_write(small.value) else None

    def _logs(self, call: cst.Call) -> bool:
        """``writer.add_scalar(...)``, ``writer.close()``, ``wandb.log(...)``."""
        name = dotted(call.func)
        owner = name.rpartition(".")[0]
        return owner in self.loggers or name.startswith("wandb.") and name != "wandb.init"

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        """The logger exists on rank 0 only: ``writer = SummaryWriter() if RANK == 0 else None``."""
        if len(updated.targets) != 1 or code(updated.targets[0].target) not in self.loggers:
            return updated
        if not isinstance(updated.value, cst.Call):
            return updated
        self.ctx.change(original, _("the logger is created on rank 0 only (None elsewhere)"))
        value = cst.IfExp(test=expr(f"{RANK} == 0"), body=updated.value, orelse=cst.Name("None"))
        return updated.with_changes(value=value)

    def _runs_script_code(self, call: cst.Call) -> bool:
        """A print that calls the script's own functions (``print(evaluate(model))``) stays
        on every rank: what it calls may need every rank (DDP's forward, collectives)."""
        defined = self.ctx.facts.get("functions", set())
        inner = [c for c in calls(call, *defined) if c is not call] if defined else []
        if inner:
            self.ctx.change(
                call,
                _("kept on every rank: it calls {f}(), which every rank must run").format(
                    f=dotted(inner[0].func)
                ),
            )
        return bool(inner)

    def _record(self, node: cst.CSTNode, kind: str) -> None:
        if kind == "print":
            self.ctx.change(node, _("printed on rank 0 only"))
        elif kind == "log":
            self.ctx.change(node, _("logged on rank 0 only"))
        else:
            what = _("written by rank 0 only")
            if self.barrier:
                what += _(", the others wait for it (dist.barrier)")
            self.ctx.change(node, what)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        name = dotted(original.func)
        if name in ("tqdm", "tqdm.tqdm", "trange", "tqdm.trange") and not any(
            a.keyword is not None and a.keyword.value == "disable" for a in updated.args
        ):
            self.ctx.change(original, _("progress bar on rank 0 only"))
            disable = keyword_arg("disable", expr(f"{RANK} != 0"))
            return updated.with_changes(args=[*updated.args, disable])
        return updated


class FolderRewrite(Rewrite):
    """Every process makes the folders it writes in, so none may fail because another made
    one first (StarGAN's ``if not os.path.exists(d): os.makedirs(d)`` on both ranks):
    ``os.makedirs(d)`` and ``path.mkdir()`` get ``exist_ok=True``, ``os.mkdir(d)`` becomes
    ``os.makedirs(d, exist_ok=True)``."""

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        name = dotted(original.func)
        method = name.rpartition(".")[2]
        if method not in ("makedirs", "mkdir") or kwarg(updated, "exist_ok") is not None:
            return updated
        if name == "os.mkdir":
            updated = updated.with_changes(func=cst.parse_expression("os.makedirs"))
        elif name != "os.makedirs" and not isinstance(original.func, cst.Attribute):
            return updated  # a function of the script's own
        self.ctx.change(
            original,
            _("{f}(..., exist_ok=True): every process makes the folder, none fails because "
              "another made it first").format(f=dotted(updated.func)),  # fmt: skip
        )
        return updated.with_changes(args=[*updated.args, keyword_arg("exist_ok", "True")])


def merge_guards(module: cst.Module) -> cst.Module:
    """Adjacent ``if RANK == 0:`` blocks become one."""
    return module.visit(_Merge())


class _Merge(cst.CSTTransformer):
    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated.with_changes(body=_merged(updated.body))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=_merged(updated.body))


def _is_guard(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.If)
        and node.orelse is None
        and code(node.test) == f"{RANK} == 0"
        and isinstance(node.body, cst.IndentedBlock)
    )


def _merged(body: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for node in body:
        last = out[-1] if out else None
        if (
            last is not None
            and _is_guard(last)
            and _is_guard(node)
            and not any(line.comment for line in node.leading_lines)
        ):
            assert isinstance(last, cst.If) and isinstance(node, cst.If)
            assert isinstance(last.body, cst.IndentedBlock)
            assert isinstance(node.body, cst.IndentedBlock)
            joined = last.body.with_changes(body=[*last.body.body, *node.body.body])
            out[-1] = last.with_changes(body=joined)
        else:
            out.append(node)
    return out
