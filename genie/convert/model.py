"""The trained model is wrapped in DistributedDataParallel where it is final (see
:mod:`genie.convert.placement`), ``nn.DataParallel`` becomes DDP, and later saves and loads of
its weights go to the plain model inside (``unwrap(model)``) so checkpoints keep the keys of a
plain model. ``unwrap`` gives a model that is plain already back as it is: the same name may
hold a plain model again (rebuilt or reloaded after training) and a function may be called
with either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from genie.convert import placement, unused
from genie.convert.base import (
    DEVICE,
    LOCAL_RANK,
    Context,
    Rewrite,
    calls,
    code,
    current,
    dotted,
    expr,
    method_calls,
    stmt,
    walk,
)
from genie.convert.refuse import hand_updated
from genie.i18n import N_, _

DATA_PARALLEL = ("DataParallel",)
WRAP = '{m} = DDP({inner}, device_ids=[{r}] if {d}.type == "cuda" else None{extra})'
# What DDP answers itself, like the model would; any other attribute (state_dict, a custom
# method like decode, a submodule) is the model's: DDP does not forward it, so unwrap().
DDP_ANSWERS = frozenset(
    "train eval parameters named_parameters buffers named_buffers children named_children "
    "modules named_modules zero_grad to cuda cpu float half double bfloat16 apply "
    "requires_grad_ register_forward_hook register_forward_pre_hook register_full_backward_hook "
    "register_buffer register_parameter no_sync forward module training join "
    "register_comm_hook type share_memory".split()
)


@dataclass
class Models:
    keys: set[str] = field(default_factory=set)  # "model", "self.net"
    wrap_at: dict[int, list[str]] = field(default_factory=dict)  # statement id -> model keys
    moved: set[int] = field(default_factory=set)  # statements that move the model already
    wrap_before: set[int] = field(default_factory=set)  # wrap before these, not after
    scope_of: dict[str, int] = field(default_factory=dict)  # key -> id of its wrap's function
    data_parallel: bool = False
    module_id: int = 0
    classes: dict[str, str] = field(default_factory=dict)  # key -> the class it is built from


def _assigned(statement: cst.SimpleStatementLine) -> tuple[str, cst.BaseExpression] | None:
    [small, *rest] = statement.body
    if rest or not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    return code(small.targets[0].target), small.value


def _moves(statement: cst.SimpleStatementLine, key: str) -> bool:
    """``key = ....to(...)`` or ``key.to(...)``."""
    assigned = _assigned(statement)
    if assigned is not None and assigned[0] == key:
        return bool(method_calls(assigned[1], "to"))
    [small, *_rest] = statement.body
    return isinstance(small, cst.Expr) and code(small.value).startswith(f"{key}.to(")


ELSEWHERE = -1  # the scope of a model wrapped in another file: wrapped wherever it is used


def find(module: cst.Module, elsewhere: frozenset[str] = frozenset()) -> Models:
    """Which names hold trained models, and after which statement each gets wrapped;
    ``elsewhere``: models that another file of the program wraps, and that this one (a
    module it imports) may be handed, wrapped, by name."""
    found = Models()
    found.keys = placement.optimized(module) | hand_updated(module)
    found.data_parallel = bool(calls(module, *DATA_PARALLEL))
    _follow_moves(module, found)
    _find_final(module, found)
    _find_wrap_points(module, found)
    for key in elsewhere - found.keys:
        found.keys.add(key)
        found.scope_of[key] = ELSEWHERE
    found.classes = {k: c for k in found.keys if (c := unused.model_class(module, k))}
    return found


def _find_final(module: cst.Module, found: Models) -> None:
    """Each model's wrap after the statement where it is final, in the first block that builds
    it; the models not built in any block are left to :func:`_find_wrap_points`."""
    trained_by = placement.trainers(module)
    for key in sorted(found.keys):
        for function, block in placement.blocks(module):
            last = placement.final_statement(block, key, trained_by)
            if last is None:
                continue
            chosen = block[last]
            found.wrap_at.setdefault(id(chosen), []).append(key)
            found.scope_of[key] = function
            if isinstance(chosen, cst.SimpleStatementLine) and _moves(chosen, key):
                found.moved.add(id(chosen))
            break


def _follow_moves(module: cst.Module, found: Models) -> None:
    """``self.model = model.to(device)``: the model trained is the moved one, self.model."""
    for node in walk(module):
        if isinstance(node, cst.SimpleStatementLine) and (assigned := _assigned(node)):
            target, value = assigned
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
                source = code(value.func.value)
                if value.func.attr.value == "to" and source in found.keys and target != source:
                    found.keys.discard(source)
                    found.keys.add(target)


def _find_wrap_points(module: cst.Module, found: Models) -> None:
    """Wrap after the last statement that moves the model or wraps it in DataParallel (in the
    scope of the first one); failing both, before its optimizer or after it is built."""
    scopes: list[tuple[int, cst.SimpleStatementLine]] = []  # (function id, statement)
    placement.statements(module, id(module), scopes)
    found.module_id = id(module)
    for key in sorted(found.keys - set(found.scope_of)):
        moving = [(f, s) for f, s in scopes if _moves(s, key)]
        dp = [(f, s) for f, s in scopes if _assigns(s, key) and calls(s, *DATA_PARALLEL)]
        built = [(f, s) for f, s in scopes if _assigns(s, key)]
        candidates = [c for c in scopes if c in moving or c in dp]
        if candidates:
            chosen = [c for c in candidates if c[0] == candidates[0][0]][-1]
        elif built:
            chosen = placement.optimizer_after(scopes, built[0], key) or built[0]
            if chosen is not built[0]:
                found.wrap_before.add(id(chosen[1]))
        else:
            continue
        found.wrap_at.setdefault(id(chosen[1]), []).append(key)
        found.scope_of[key] = chosen[0]
        if moving and scopes.index(moving[0]) <= scopes.index(chosen):
            found.moved.add(id(chosen[1]))


def _assigns(statement: cst.SimpleStatementLine, key: str) -> bool:
    assigned = _assigned(statement)
    return assigned is not None and assigned[0] == key and isinstance(assigned[1], cst.Call)


class ModelRewrite(Rewrite):
    def __init__(self, ctx: Context, models: Models) -> None:
        super().__init__(ctx)
        self.models = models
        self.functions: list[int] = []
        self.params: list[set[str]] = []  # each enclosing function's parameters
        self.wrapped: set[str] = set()
        self.rebuilt: set[str] = set()  # built again after the wrap: plain models

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(id(node))
        self.params.append({p.name.value for p in node.params.params})

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        self.functions.pop()
        self.params.pop()
        return updated

    def _after_wrap(self, key: str) -> bool:
        """Whether ``key`` names the wrapped model where the rewrite is now; a model another
        file wraps, only where a function is handed it (a parameter of that name)."""
        if key not in self.models.scope_of or key in self.rebuilt:
            return False
        if self.models.scope_of[key] == ELSEWHERE:
            return bool(self.params) and key in self.params[-1]
        here = self.functions[-1] if self.functions else self.models.module_id
        return key in self.wrapped or self.models.scope_of[key] != here

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = dotted(original.func)
        if name.split(".")[-1] in DATA_PARALLEL and updated.args:
            self.ctx.change(original, _("nn.DataParallel -> DistributedDataParallel"))
            return updated.args[0].value
        if name in ("torch.save", "save") and updated.args:
            first = code(updated.args[0].value)
            if first in self.models.keys and self._after_wrap(first):
                self.ctx.change(original, _("torch.save({m}) saves unwrap({m})").format(m=first))
                self.ctx.uses.add("unwrap")
                value = expr(f"unwrap({first})")
                return updated.with_changes(args=[cst.Arg(value), *updated.args[1:]])
        return updated

    def leave_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        owner, attr = code(original.value), original.attr.value
        if owner not in self.models.keys:
            return updated
        if attr == "module" and not self.models.data_parallel:
            self.mark_todo(
                original,
                N_("{c} predates DDP: under DDP, .module is the unwrapped model"),
                c=code(original),
            )
        elif attr not in DDP_ANSWERS and self._after_wrap(owner):
            self.ctx.change(original, _("{m}.{a} -> unwrap({m}).{a}").format(m=owner, a=attr))
            self.ctx.uses.add("unwrap")
            return updated.with_changes(value=expr(f"unwrap({owner})"))
        return updated

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        keys = self.models.wrap_at.get(id(original))
        if keys is None:
            if self._is_noop(updated):  # was ``model = nn.DataParallel(model)``
                return cst.RemoveFromParent()
            self.rebuilt.update(k for k in self.wrapped if placement.builds(original, k))
            return updated
        moved = id(original) in self.models.moved
        wraps = [self._wrap(original, key, moved) for key in keys]
        wraps += self._seed_each_rank(original)
        if self._is_noop(updated):
            return wraps[0].with_changes(leading_lines=updated.leading_lines)
        if id(original) in self.models.wrap_before:
            self.insert_before(*wraps)
        else:
            self.insert_after(*wraps)
        return updated

    def _seed_each_rank(self, original: cst.CSTNode) -> list[cst.BaseStatement]:
        """After the last wrap, where the script draws random numbers: every rank its own
        (else every rank picks the same random batches and the same noise)."""
        planned = sum(len(keys) for keys in self.models.wrap_at.values())
        if not self.ctx.facts.get("draws") or len(self.wrapped) != planned:
            return []
        self.ctx.uses.add("seed_each_rank")
        self.ctx.change(original, _("every rank draws its own random numbers from here on "
                                    "(seed_each_rank(): the seed + RANK)"))  # fmt: skip
        return [stmt("seed_each_rank()\n")]

    def _wrap(self, original: cst.CSTNode, key: str, moved: bool) -> cst.BaseStatement:
        """``key = DDP(key, ...)``, recorded."""
        self.wrapped.add(key)
        self.ctx.uses.add("DDP")
        inner = key if moved else f"{key}.to({DEVICE})"
        self.ctx.change(original, _("{m} wrapped in DistributedDataParallel").format(m=key))
        cls = self.models.classes.get(key)
        idle = dict(current().unused).get(cls or "")
        if idle:
            self.ctx.change(
                original,
                _("find_unused_parameters=True: {c}'s {a} take(s) no part in forward()").format(
                    c=cls, a=", ".join(f"self.{a}" for a in idle)
                ),
            )
        extra = ", find_unused_parameters=True" if idle else ""
        return stmt(WRAP.format(m=key, inner=inner, r=LOCAL_RANK, d=DEVICE, extra=extra))

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        wraps = self._wraps_after(original)
        if wraps:
            self.insert_after(*wraps)
        return updated

    def _wraps_after(self, original: cst.BaseCompoundStatement) -> list[cst.BaseStatement]:
        """Models final after a compound statement (built in a branch, loaded in an ``if``)."""
        last: cst.CSTNode = original
        while isinstance(last, (cst.If, cst.Else, cst.With)):
            orelse = last.orelse if isinstance(last, cst.If) else None
            last = orelse or last.body.body[-1]
        wraps = [self._wrap(last, key, False) for key in self.models.wrap_at.get(id(original), [])]
        return wraps + self._seed_each_rank(last) if wraps else wraps

    def _is_noop(self, statement: cst.SimpleStatementLine) -> bool:
        assigned = _assigned(statement)
        return (
            assigned is not None
            and assigned[0] in self.models.keys
            and (code(assigned[1]) == assigned[0])
        )

    def leave_If(
        self, original: cst.If, updated: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        """``if torch.cuda.device_count() > 1:`` left empty by the DataParallel removal."""
        wraps = self._wraps_after(original)
        if isinstance(updated.body, cst.IndentedBlock) and not updated.body.body:
            if updated.orelse is None:
                self.ctx.change(original, _("the DataParallel branch removed"))
                return cst.FlattenSentinel(wraps) if wraps else cst.RemoveFromParent()
            updated = updated.with_changes(body=cst.IndentedBlock(body=[stmt("pass\n")]))
        if wraps:
            self.insert_after(*wraps)
        return updated
