"""Join the process group torchrun started, and leave it at the end.

After the script's imports: the imports DDP needs, this process's ``LOCAL_RANK``, ``RANK`` and
``DEVICE``, and ``setup_distributed()``. The ``if __name__ == "__main__":`` block (or, in a
script without one, every top-level statement from the first that does work) runs between
``setup_distributed()`` and ``cleanup_distributed()`` in a ``finally``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst

from genie.convert import decisions, iterables, samplers, seeds
from genie.convert.base import Context, code, dotted, stmt
from genie.i18n import _

BLOCK = '''
# torchrun starts one process per device and gives each its LOCAL_RANK (on this machine)
# and RANK (among all processes); each process trains on its own device.
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
RANK = int(os.environ.get("RANK", "0"))
DEVICE = torch.device(f"cuda:{LOCAL_RANK}" if torch.cuda.is_available() else "cpu")


def setup_distributed() -> None:
    """Join the other processes: NCCL between GPUs, gloo between CPU processes."""
    if DEVICE.type == "cuda":
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo")


def cleanup_distributed() -> None:
    """Leave the process group once what its collectives used is freed (gloo can abort at
    exit otherwise: pytorch/pytorch#190489)."""
    gc.collect()
    dist.destroy_process_group()
'''

INIT = '    dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo")\n'
SEED_LINE = (
    "    torch.manual_seed(shared_seed())  # the script sets no seed: rank 0's, everywhere\n"
)
SHARED_SEED = '''

def shared_seed() -> int:
    """Rank 0's random seed, for every rank: what the script draws before its models are
    wrapped (synthetic data, targets) must be the same on every rank."""
    seed = torch.tensor([torch.initial_seed() % 2**62], device=DEVICE)
    dist.broadcast(seed, src=0)
    return int(seed.item())
'''

WORLD_SIZE_LINE = 'WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))\n'
SHARD = '''

def shard(items: list) -> list:
    """This process's share of ``items``, the same count on every process (or they would
    wait for each other forever at the end)."""
    return items[RANK::WORLD_SIZE][: len(items) // WORLD_SIZE]
'''

UNWRAP = '''

def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside DDP's wrapper; a plain one (rebuilt or reloaded) as it is."""
    return model.module if isinstance(model, DDP) else model
'''

IMPORTS = {  # name the script must have -> the import that binds it
    "gc": "import gc",
    "os": "import os",
    "torch": "import torch",
    "dist": "import torch.distributed as dist",
    "DDP": "from torch.nn.parallel import DistributedDataParallel as DDP",
    "DistributedSampler": "from torch.utils.data.distributed import DistributedSampler",
}


def _bound_names(module: cst.Module) -> set[str]:
    """Top-level names the script's imports bind."""
    names = set()
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                small.names, cst.ImportStar
            ):
                for alias in small.names:
                    bound = alias.asname.name if alias.asname else alias.name
                    names.add(dotted(bound).split(".")[0])
    return names


def _is_header(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    docstring = isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)
    return docstring or isinstance(small, (cst.Import, cst.ImportFrom))


def _main_guard(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.If) and code(statement.test).replace("'", '"') in (
        '__name__ == "__main__"',
        '"__main__" == __name__',
    )


def _try_finally(body: Sequence[Any]) -> cst.Try:
    """``try: body finally: cleanup_distributed()``; body's comments stay above it."""
    first = body[0]
    inner = [first.with_changes(leading_lines=[]), *body[1:]]
    return cst.Try(
        body=cst.IndentedBlock(body=inner),
        finalbody=cst.Finally(body=cst.IndentedBlock(body=[stmt("cleanup_distributed()\n")])),
        leading_lines=first.leading_lines,
    )


def _setup_and_teardown(body: Sequence[Any]) -> list[Any]:
    wrapped = _try_finally(body)
    setup = stmt("setup_distributed()\n").with_changes(leading_lines=wrapped.leading_lines)
    return [setup, wrapped.with_changes(leading_lines=[])]


def apply(module: cst.Module, ctx: Context, library: bool = False) -> cst.Module:
    """The header after the imports, and the main block (or top-level run) between joining
    and leaving; for a ``library`` (a module of the script's that it imports), the header
    only, without joining: the script joins before it calls the module."""
    header = 0
    while header < len(module.body) and _is_header(module.body[header]):
        header += 1
    bound = _bound_names(module)
    group = not library or bool(ctx.uses & {decisions.HELPER, "barrier"})
    wanted = [
        *(["gc"] if not library else []),
        "os",
        "torch",
        *(["dist"] if group else []),
        *(["DDP"] if ctx.uses & {"DDP", "unwrap"} else []),
        *(["DistributedSampler"] if "DistributedSampler" in ctx.uses else []),
    ]
    imports = [stmt(IMPORTS[n] + "\n") for n in wanted if n not in bound]
    text = BLOCK.split("\n\ndef setup_distributed")[0] if library else BLOCK
    if ctx.uses & {"shard", "per_rank", "RankShard"}:
        text = text.replace("DEVICE = ", WORLD_SIZE_LINE + "DEVICE = ", 1)
    if "shard" in ctx.uses:
        text += SHARD
    if "per_rank" in ctx.uses:
        text += samplers.HELPERS
    if "RankShard" in ctx.uses:
        text += iterables.HELPER
    if "unwrap" in ctx.uses:
        text += UNWRAP
    if ctx.facts.get("seeding") == "none" and not library:
        text = text.replace(INIT, INIT + SEED_LINE, 1) + SHARED_SEED
    if "seed_each_rank" in ctx.uses:
        text += seeds.each_rank(ctx.facts["draws"])
    if decisions.HELPER in ctx.uses:
        text += decisions.CODE
    block = list(cst.parse_module("pass\n" + text).body[1:])  # keeps the comment above
    block[0] = block[0].with_changes(leading_lines=[cst.EmptyLine(), *block[0].leading_lines])
    rest = list(module.body[header:])
    guard = next((i for i, s in enumerate(rest) if _main_guard(s)), None)
    if library:
        pass  # imported: its main block, if any, does not run
    elif guard is None:
        _wrap_top_level(rest, ctx)
    else:
        _wrap_main_block(rest, guard, ctx)
    body = [*module.body[:header], *imports, *block, *rest]
    if rest:
        body[len(body) - len(rest)] = _blank_before(body[len(body) - len(rest)])
    return module.with_changes(body=body)


_NEEDS_GROUP = ("DDP(", "DistributedSampler(", "shard(", "dist.")


def _wrap_main_block(rest: list[Any], guard: int, ctx: Context) -> None:
    """The main block runs in the try whose finally leaves the group. It also joins, unless
    top-level statements before it already need the group (a DDP model or a sampler built
    at import): then the script joins before the first of those statements."""
    main = rest[guard]
    assert isinstance(main, cst.If) and isinstance(main.body, cst.IndentedBlock)
    defines = (cst.FunctionDef, cst.ClassDef)
    early = any(
        any(mark in code(s) for mark in _NEEDS_GROUP)
        for s in rest[:guard]
        if not isinstance(s, defines)
    )
    what = (
        _("leaves the process group in a finally")
        if early
        else _("joins the process group and leaves it in a finally")
    )
    ctx.change(main, _("the main block ") + what)
    inner = [_try_finally(main.body.body)] if early else _setup_and_teardown(main.body.body)
    rest[guard] = main.with_changes(body=main.body.with_changes(body=inner))
    if early:
        _join_before_work(rest, ctx)


def _join_before_work(rest: list[Any], ctx: Context) -> int | None:
    """``setup_distributed()`` before the first top-level statement that does work."""
    defines = (cst.FunctionDef, cst.ClassDef)
    work = next((i for i, s in enumerate(rest) if not isinstance(s, defines)), None)
    if work is None:
        return None
    first = rest[work]
    setup = stmt("setup_distributed()\n").with_changes(leading_lines=first.leading_lines)
    rest[work] = first.with_changes(leading_lines=[cst.EmptyLine()])
    rest.insert(work, setup)
    ctx.change(first, _("the script joins the process group here, before it needs it"))
    return work


def _is_loop(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, (cst.For, cst.While, cst.With))


def _wrap_top_level(rest: list[Any], ctx: Context) -> None:
    """No main block: join before the first statement that does work; from the first loop
    after the last function or class on (or, with no loop there, everything after it, such
    as a bare ``main()``), the script runs in a try whose finally leaves."""
    work = _join_before_work(rest, ctx)
    if work is None:
        return
    defines = (cst.FunctionDef, cst.ClassDef)
    last_def = max((i for i, s in enumerate(rest) if isinstance(s, defines)), default=-1)
    after = [i for i in range(max(last_def, work) + 1, len(rest))] if last_def >= 0 else []
    loops = [i for i in range(work + 1, len(rest)) if i > last_def and _is_loop(rest[i])]
    tail = loops[0] if loops else after[0] if after else None
    if tail is None:
        rest.append(stmt("cleanup_distributed()\n"))
    else:
        rest[tail:] = [_try_finally(rest[tail:])]


def _blank_before(statement: Any) -> Any:
    """Two blank lines after genie's functions, as PEP 8 has it, whatever was there."""
    lines = list(statement.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return statement.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *lines])
