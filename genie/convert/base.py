"""What every rewrite shares: the record of changes (with the original line of each), small
libcst helpers, and a transformer that can add statements around the one it is inside.

Line numbers always refer to the user's original script: positions are computed once on the
parsed original, and libcst keeps the identity of every node a rewrite leaves alone, so a
later rewrite finds the line of a node through its untouched descendants.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import CodeRange

from genie.convert.summary import Change
from genie.i18n import _

# Names the converted script defines once, right after its imports (see setup.py).
LOCAL_RANK, RANK, WORLD_SIZE, DEVICE = "LOCAL_RANK", "RANK", "WORLD_SIZE", "DEVICE"
TODO = "# genie: TODO: "

Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


@dataclass(frozen=True)
class Program:
    """What the script's own local modules hold (see :mod:`genie.convert.program`), for the
    rewrite of each file: the pieces of training may live in different files."""

    optimizer_methods: frozenset[str] = frozenset()  # ``configure_optimizers``, any file's
    models: frozenset[str] = frozenset()  # trained models found in any file, by name
    loaders: frozenset[str] = frozenset()  # training loaders given a DistributedSampler
    epoch_loaders: frozenset[str] = frozenset()  # those with an epoch loop in some file
    fed: frozenset[tuple[str, str]] = frozenset()  # (function, parameter) given training data
    # those given a training loader (not an evaluation loader nor a list): their epoch loops
    # set the loader's epoch where the loader is handed in (a Solver's ``self.loader``)
    trained: frozenset[tuple[str, str]] = frozenset()
    # model classes with submodules forward() never uses: (class, (attribute, ...))
    unused: frozenset[tuple[str, tuple[str, ...]]] = frozenset()


# The program being converted (None: a script on its own), read through current()
PROGRAM: ContextVar[Program | None] = ContextVar("genie_convert_program", default=None)


def current() -> Program:
    return PROGRAM.get() or Program()


@dataclass
class Context:
    """Shared by the rewrites of one conversion: positions, findings, and the changes made."""

    positions: Mapping[cst.CSTNode, CodeRange]
    changes: list[Change] = field(default_factory=list)
    uses: set[str] = field(default_factory=set)  # "DDP", "DistributedSampler", "barrier"...
    facts: dict[str, Any] = field(default_factory=dict)

    def line(self, node: cst.CSTNode) -> int:
        """The original line of ``node``: that of its first descendant that existed there.
        Rewritten nodes are new objects, so this is often a whitespace leaf they kept; the
        blank and comment lines above a statement (its ``leading_lines``) are skipped, else
        the report would name the line above."""
        todo: list[cst.CSTNode] = [node]
        above = 0  # the line after the leading lines: where a statement made anew starts
        while todo:
            current = todo.pop(0)
            if isinstance(current, cst.EmptyLine):
                lines = [self.positions[n].start.line for n in walk(current) if n in self.positions]
                above = max([above, *(x + 1 for x in lines)])
                continue
            where = self.positions.get(current)
            if where is not None:
                return where.start.line
            todo[:0] = list(current.children)
        return above

    def change(self, node: cst.CSTNode, what: str) -> None:
        self.changes.append(Change(self.line(node), what))

    def todo(self, node: cst.CSTNode, what: str) -> None:
        self.changes.append(Change(self.line(node), what, todo=True))


def dotted(node: cst.CSTNode | None) -> str:
    """``torch.nn.DataParallel`` for that attribute chain; "" for anything else."""
    if node is None:
        return ""
    try:
        return get_full_name_for_node(node) or ""
    except Exception:  # pragma: no cover - libcst raises on exotic nodes
        return ""


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def expr(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


def stmt(source: str) -> cst.BaseStatement:
    return cst.parse_statement(source)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        todo.extend(current.children)


def calls(node: cst.CSTNode, *names: str) -> list[cst.Call]:
    """Calls below ``node`` whose function's dotted name is, or ends with ``.``, one of names."""
    found = []
    for n in walk(node):
        if isinstance(n, cst.Call):
            name = dotted(n.func)
            if any(name == x or name.endswith("." + x) for x in names):
                found.append(n)
    return found


def method_calls(node: cst.CSTNode, method: str) -> list[cst.Call]:
    """``x.method(...)`` calls below ``node``, whatever ``x`` is."""
    return [
        n
        for n in walk(node)
        if isinstance(n, cst.Call)
        and isinstance(n.func, cst.Attribute)
        and n.func.attr.value == method
    ]


def keyword_arg(name: str, value: cst.BaseExpression | str) -> cst.Arg:
    """``name=value`` as genie writes an argument it adds (a string is parsed)."""
    if isinstance(value, str):
        value = cst.parse_expression(value)
    return cst.Arg(
        value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )


def insert_arg(args: list[cst.Arg], at: int, arg: cst.Arg) -> None:
    """``args.insert(at, arg)``; last in a call with one argument per line and a trailing
    comma, ``arg`` gets a line of its own."""
    last = args[-1].comma if at == len(args) >= 2 else None
    if isinstance(last, cst.Comma) and isinstance(
        last.whitespace_after, cst.ParenthesizedWhitespace
    ):
        arg = arg.with_changes(comma=last)
        args[-1] = args[-1].with_changes(comma=args[-2].comma)
    args.insert(at, arg)


def assigned_once(module: cst.Module, value: cst.BaseExpression) -> cst.BaseExpression:
    """What a name (or attribute) is assigned, where it is assigned once in ``module``;
    anything else as it is."""
    if not isinstance(value, (cst.Name, cst.Attribute)):
        return value
    assigned = [
        n.value
        for n in walk(module)
        if isinstance(n, cst.Assign)
        and len(n.targets) == 1
        and code(n.targets[0].target) == code(value)
    ]
    return assigned[0] if len(assigned) == 1 else value


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def with_comment(node: Statement, text: str) -> Statement:
    line = cst.EmptyLine(comment=cst.Comment(text))
    return node.with_changes(leading_lines=[*node.leading_lines, line])


def rank0(body: Sequence[cst.BaseStatement], leading: Sequence[cst.EmptyLine] = ()) -> cst.If:
    """``if RANK == 0:`` around ``body``."""
    return cst.If(
        test=expr(f"{RANK} == 0"),
        body=cst.IndentedBlock(body=list(body)),
        leading_lines=list(leading),
    )


@dataclass
class _Around:
    before: list[cst.BaseStatement] = field(default_factory=list)
    after: list[cst.BaseStatement] = field(default_factory=list)
    todos: list[str] = field(default_factory=list)
    guard: bool = False


class Rewrite(cst.CSTTransformer):
    """A transformer that may put statements before or after the statement it is in, mark it
    with a ``# genie: TODO`` comment, or run it on rank 0 only."""

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.ctx = ctx
        self._open: list[_Around] = []
        self._elifs: set[int] = set()  # an elif is an If node, but not a statement

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.If) and isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))
        if self._is_statement(node):
            self._open.append(_Around())
        return super().on_visit(node)

    def on_leave(self, original: Any, updated: Any) -> Any:
        result = super().on_leave(original, updated)
        if not self._is_statement(original):
            return result
        around = self._open.pop()
        if not isinstance(result, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return result
        for text in around.todos:
            result = with_comment(result, TODO + text)
        if around.guard:
            result = rank0([result.with_changes(leading_lines=[])], result.leading_lines)
        if not around.before and not around.after:
            return result
        before = list(around.before)
        if before:  # the user's comments above the statement move above what is inserted
            before[0] = before[0].with_changes(leading_lines=result.leading_lines)
            result = result.with_changes(leading_lines=[])
        return cst.FlattenSentinel([*before, result, *around.after])

    def _is_statement(self, node: cst.CSTNode) -> bool:
        return isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and (
            id(node) not in self._elifs
        )

    @property
    def _here(self) -> _Around | None:
        return self._open[-1] if self._open else None

    def insert_before(self, *statements: cst.BaseStatement) -> None:
        assert self._here is not None
        self._here.before.extend(statements)

    def insert_after(self, *statements: cst.BaseStatement) -> None:
        assert self._here is not None
        self._here.after.extend(statements)

    def mark_todo(self, node: cst.CSTNode, message: str, **fields: str) -> None:
        """Report ``message`` (marked with ``N_``) and put it as a comment above the statement
        holding ``node``: the report in genie's language, the comment in English like the
        rest of the code."""
        self.ctx.todo(node, _(message).format(**fields))
        if self._here is not None:
            self._here.todos.append(message.format(**fields))

    def guard_here(self) -> None:
        assert self._here is not None
        self._here.guard = True
