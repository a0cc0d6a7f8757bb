"""Where the model that trains is wrapped: where it is final.

The model that trains is found through its optimizer (``torch.optim.X(model.parameters())``)
or, with no optimizer, through a training loop that updates ``model.parameters()`` by hand
after ``backward()``. It is wrapped in the block (module, ``__main__`` block or function) where
it is built, after every statement that builds, moves, initialises or loads it
(``model.apply(init)``, ``model.load_state_dict(...)``, a model chosen in an ``if``/``elif``)
and before the first statement that uses it to train (its optimizer, a loop, a function that
trains it): DDP broadcasts rank 0's weights when it wraps, so every rank starts from the final
initial weights. A model built again after training (to show reloading) is not the one wrapped.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from genie.convert.base import calls, code, current, method_calls, walk
from genie.convert.refuse import optimized as optimized_in
from genie.convert.refuse import optimizer_calls

Block = tuple[int, list[cst.BaseStatement]]  # (id of the function, or of the module; body)
PRINTS = ("print",)


def optimized(module: cst.Module) -> set[str]:
    """Models whose parameters an optimizer updates."""
    return optimized_in(module)


def blocks(module: cst.Module) -> list[Block]:
    """The module's body, its ``if __name__ == "__main__":`` body and every function's body."""
    out: list[Block] = [(id(module), list(module.body))]
    for statement in module.body:
        if isinstance(statement, cst.If) and "__main__" in code(statement.test):
            out.append((id(module), _body(statement)))
    for node in walk(module):
        if isinstance(node, cst.FunctionDef) and isinstance(node.body, cst.IndentedBlock):
            out.append((id(node), list(node.body.body)))
    return out


def _body(node: cst.If | cst.Else) -> list[cst.BaseStatement]:
    return list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []


def trainers(module: cst.Module) -> set[str]:
    """Functions and classes of the script that train: they call backward() or build an
    optimizer (or, in another file of the program, a model's method builds one)."""
    return {
        n.name.value
        for n in walk(module)
        if isinstance(n, (cst.FunctionDef, cst.ClassDef))
        and (method_calls(n, "backward") or optimizer_calls(n))
    } | current().optimizer_methods


def _names(node: cst.CSTNode) -> Iterator[str]:
    for n in walk(node):
        if isinstance(n, (cst.Name, cst.Attribute)):
            yield code(n)


def mentions(node: cst.CSTNode, key: str) -> bool:
    return any(name == key for name in _names(node))


def _assigns(statement: cst.BaseStatement, key: str) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return any(
        isinstance(small, cst.Assign) and any(_a_model(v) for v in _values(small, key))
        for small in statement.body
    )


def _values(assign: cst.Assign, key: str) -> Iterator[cst.BaseExpression]:
    """What ``assign`` gives ``key``: ``key = value``, or ``key, config = value, c``."""
    for target in (t.target for t in assign.targets):
        if code(target) == key:
            yield assign.value
        elif isinstance(target, cst.Tuple) and isinstance(assign.value, cst.Tuple):
            if len(target.elements) == len(assign.value.elements):
                pairs = zip(target.elements, assign.value.elements, strict=True)
                yield from (v.value for t, v in pairs if code(t.value) == key)


def _a_model(value: cst.BaseExpression) -> bool:
    """What may hold a model: a call, a name, an attribute, an item; not ``None`` or a literal."""
    if isinstance(value, cst.Name):
        return value.value not in ("None", "True", "False")
    return isinstance(value, (cst.Call, cst.Attribute, cst.Subscript))


def builds(statement: cst.BaseStatement, key: str) -> bool:
    """``key = ...``, ``key.to(...)``, or an ``if``/``elif`` whose every branch assigns ``key``
    (or raises)."""
    if _assigns(statement, key):
        return True
    if isinstance(statement, cst.SimpleStatementLine):
        return any(
            code(c.func.value) == key  # type: ignore[attr-defined]
            for c in method_calls(statement, "to") + method_calls(statement, "cuda")
        )
    return isinstance(statement, cst.If) and _every_branch_assigns(statement, key)


def _every_branch_assigns(node: cst.If, key: str) -> bool:
    branch: cst.If | cst.Else | None = node
    while isinstance(branch, cst.If):
        if not any(_assigns(s, key) for s in _body(branch)):
            return False
        branch = branch.orelse
    if branch is None:
        return False
    return any(_assigns(s, key) for s in _body(branch)) or any(
        isinstance(small, cst.Raise)
        for s in _body(branch)
        if isinstance(s, cst.SimpleStatementLine)
        for small in s.body
    )


def uses(statement: cst.BaseStatement, key: str, trained_by: set[str]) -> bool:
    """Whether ``statement`` starts training ``key`` (or hands it away): its optimizer, a loop
    over it, a forward, a call to a function or class of the script that trains, a return."""
    if not mentions(statement, key):
        return False
    if isinstance(statement, (cst.For, cst.While)):
        return True
    for call in optimizer_calls(statement):
        if any(code(p.func.value) == key for p in method_calls(call, "parameters")):  # type: ignore[attr-defined]
            return True
    for call in (n for n in walk(statement) if isinstance(n, cst.Call)):
        name = code(call.func)
        method = name.split(".")[-1]
        if name == key or (method in trained_by and any(mentions(a.value, key) for a in call.args)):
            return True
        if name == f"{key}.{method}" and method in trained_by:  # model.configure_optimizers()
            return True
    return any(isinstance(n, (cst.Return, cst.Yield)) for n in walk(statement))


def final_statement(block: list[cst.BaseStatement], key: str, trained_by: set[str]) -> int | None:
    """The index of the statement after which ``key`` is final in ``block``: the last one that
    builds, moves, initialises or loads it before its first use; None when it is not built
    here."""
    first = next((i for i, s in enumerate(block) if builds(s, key)), None)
    if first is None:
        return None
    end = next(
        (j for j in range(first + 1, len(block)) if uses(block[j], key, trained_by)), len(block)
    )
    last = first
    for i in range(first + 1, end):
        statement = block[i]
        if mentions(statement, key) and not _only_prints(statement):
            last = i
    return last


def _only_prints(statement: cst.BaseStatement) -> bool:
    found = calls(statement, *PRINTS)
    return bool(found) and isinstance(statement, cst.SimpleStatementLine)


def optimizer_after(
    scopes: list[tuple[int, cst.SimpleStatementLine]],
    built: tuple[int, cst.SimpleStatementLine],
    key: str,
) -> tuple[int, cst.SimpleStatementLine] | None:
    """The statement building ``key``'s optimizer after ``built``, in the same function: a
    model never moved at top level (moved in a branch, initialised, loaded) is wrapped just
    before its optimizer, once every rank has done all that to it."""
    for function, statement in scopes[scopes.index(built) + 1 :]:
        if function != built[0]:
            continue
        for call in optimizer_calls(statement):
            owners = [code(p.func.value) for p in method_calls(call, "parameters")]  # type: ignore[attr-defined]
            if key in owners:
                return function, statement
    return None


def statements(
    node: cst.CSTNode,
    function: int,
    out: list[tuple[int, cst.SimpleStatementLine]],
    branch: bool = False,
) -> None:
    """Every simple statement with its function; those in a branch (``if``, loop, ``try``)
    are left out, since a wrap there may never run."""
    for child in node.children:
        if isinstance(child, cst.SimpleStatementLine) and not branch:
            out.append((function, child))
        if isinstance(child, cst.FunctionDef):
            statements(child, id(child), out)
        else:
            inside = branch or isinstance(child, _BRANCHES)
            statements(child, function, out, inside)


_BRANCHES = (cst.If, cst.For, cst.While, cst.Try, cst.With)
