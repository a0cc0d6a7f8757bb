"""``genie convert``: a single-device training script -> a DDP script for torchrun.

:func:`convert` is pure: source text in, converted text and the list of changes out. Each
rewrite is a small libcst transformer in its own module, applied in this order: device,
model, loaders, rank 0, then the process-group setup around everything. libcst keeps the
script's comments and layout; black formats the result when the script was black-formatted.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from genie.convert.summary import Change
from genie.convert.summary import report as report
from genie.errors import GenieError
from genie.i18n import _

BLACK_LINE_LENGTHS = (88, 100, 120, 79)


@dataclass(frozen=True)
class Conversion:
    source: str
    code: str
    changes: tuple[Change, ...]
    batch: str | None  # the training loader's per-process batch size, as written
    evaluation: tuple[str, ...]  # evaluation loaders left whole
    split: bool = True  # whether the training data was split across the processes
    seeds: str = "fixed"  # how the script seeds: "fixed", "random" or "none"
    # the script's own modules written as copies (program.Local, its conversion), and those
    # that only print or write files, left as they are
    modules: tuple[tuple[Any, Conversion], ...] = ()
    left: tuple[str, ...] = ()

    @property
    def todos(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.todo)


@dataclass
class _File:
    """One file's rewrite, before its imports point at the copies and black formats it."""

    tree: Any
    ctx: Any
    found: Any  # loaders.Loaders
    split: bool
    training: bool  # changed beyond its prints and file writes


def convert(source: str, script: str = "script.py", modules: Any = None) -> Conversion:
    """Convert ``source`` (the text of ``script``) and the script's own ``modules`` it
    imports (program.read: dotted name -> program.Local); GenieError when it must not be."""
    from genie.convert import program, refuse
    from genie.convert.base import PROGRAM

    modules = dict(modules or {})
    main = _parse(source, script)
    wrappers = {name: _parse(m.source, m.label) for name, m in modules.items()}
    trees = {name: w.module for name, w in wrappers.items()}
    token = PROGRAM.set(program.facts({"__main__": main.module, **trees}))
    try:
        refuse.check(main.module, script, {modules[n].label: t for n, t in trees.items()})
        done = {name: _convert_file(w, library=True) for name, w in wrappers.items()}
        chosen = program.copies(modules, trees, {n for n, f in done.items() if f.training})
        mine = _convert_file(main, elsewhere=[done[n] for n in chosen])
    finally:
        PROGRAM.reset(token)
    copied = tuple(
        (modules[n], _finish(done[n], modules[n].source, chosen, modules[n]))
        for n in sorted(chosen)
    )
    conversion = _finish(mine, source, chosen, None)
    left = tuple(
        sorted(modules[n].label for n, f in done.items() if n not in chosen and f.ctx.changes)
    )
    evaluation = [*conversion.evaluation, *(e for _m, c in copied for e in c.evaluation)]
    batch = next((c.batch for c in (conversion, *(c for _m, c in copied)) if c.batch), None)
    return dataclasses.replace(
        conversion,
        batch=batch,
        evaluation=tuple(evaluation),
        split=mine.split or any(done[n].split for n in chosen),
        modules=copied,
        left=left,
    )


def _parse(source: str, script: str) -> Any:
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    try:
        return MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as err:
        raise GenieError(
            _("{s} is not valid Python: line {l}: {m}").format(
                s=script, l=err.raw_line, m=err.message
            )
        ) from None


def _convert_file(wrapper: Any, library: bool = False, elsewhere: Any = ()) -> _File:
    """One file's rewrite; a ``library`` is a module of the script's, and ``elsewhere`` the
    modules converted with the script (what they do, the script need not)."""
    import libcst as cst
    from libcst.metadata import PositionProvider

    from genie.convert import base, seeds

    tree = wrapper.module
    ctx = base.Context(positions=wrapper.resolve(PositionProvider))
    ctx.facts["names"] = {n.value for n in base.walk(tree) if isinstance(n, cst.Name)}
    ctx.facts["seeding"] = seeds.seeding(tree)  # unseeded: rank 0's seed on every rank
    ctx.facts["draws"] = seeds.draws(tree)
    ctx.facts["functions"] = {
        n.name.value for n in base.walk(tree) if isinstance(n, (cst.FunctionDef, cst.ClassDef))
    }
    return _rewrite(tree, ctx, library, list(elsewhere))


def _finish(done: _File, source: str, chosen: set[str], local: Any) -> Conversion:
    """Imports pointed at the copies, black (where the file was black-formatted)."""
    import black

    from genie.convert import program

    tree = done.tree.visit(program.ImportRewrite(done.ctx, local, chosen))
    mode = _black_mode(source)
    text = black.format_str(tree.code, mode=mode) if mode else tree.code
    changes = tuple(sorted(done.ctx.changes, key=lambda c: (c.line, c.todo)))
    found = done.found
    return Conversion(
        source,
        text,
        changes,
        found.batch,
        tuple(found.evaluation),
        split=done.split,
        seeds=done.ctx.facts["seeding"],
    )


def _rewrite(tree: Any, ctx: Any, library: bool, elsewhere: list[_File]) -> _File:
    """Every rewrite, in order."""
    from genie.convert import batches, decisions, device, loaders, model, placement, rank0, setup
    from genie.convert.base import current

    tree = tree.visit(device.DeviceRewrite(ctx))
    others = current().models if library else frozenset()
    tree = tree.visit(model.ModelRewrite(ctx, model.find(tree, others)))
    found = loaders.find(tree)
    tree = tree.visit(loaders.LoaderRewrite(ctx, found))
    hand = batches.find(tree, loaders.known_data(tree))
    tree = tree.visit(batches.HandBatchRewrite(ctx, hand))
    before = len(ctx.changes)
    tree = tree.visit(
        rank0.Rank0Rewrite(ctx, barrier=rank0.reads_files(tree), loggers=rank0.loggers(tree))
    )
    tree = rank0.merge_guards(tree)
    shown = len(ctx.changes) - before  # prints and writes on rank 0 only
    tree = tree.visit(rank0.FolderRewrite(ctx))
    tree = tree.visit(decisions.DecisionRewrite(ctx, placement.trainers(tree)))
    tree = setup.apply(tree, ctx, library)
    split = bool(ctx.uses & {"DistributedSampler", "shard", "per_rank", "RankShard"})
    split = (split or hand.drawn) and not hand.todo
    done = _File(tree, ctx, found, split, len(ctx.changes) - shown > 0)
    if library:
        return done
    if "DDP" not in ctx.uses and not any("DDP" in f.ctx.uses for f in elsewhere):
        ctx.todo(
            tree,
            _(
                "found no model to wrap in DDP (it is built where genie cannot see): wrap it "
                "once it is on DEVICE, DDP(model, device_ids=[LOCAL_RANK])"
            ),
        )
    everywhere = [done, *elsewhere]
    if not any(f.split for f in everywhere) and not any(c.todo for c in ctx.changes):
        ctx.todo(
            tree,
            _(
                "found no training data to split across the processes (no DataLoader, no "
                "training loop in this script): every process would train on the same data"
            ),
        )
    return done


def _black_mode(source: str) -> Any:
    """The black mode ``source`` is already formatted with, or None: a script black keeps
    unchanged stays black-clean, and any other keeps its own layout (only genie's lines are
    new)."""
    import black

    for length in BLACK_LINE_LENGTHS:
        mode = black.Mode(line_length=length)
        try:
            if black.format_str(source, mode=mode) == source:
                return mode
        except black.InvalidInput:  # pragma: no cover - libcst parsed it already
            return None
    return None


def unified_diff(conversion: Conversion, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        conversion.source.splitlines(keepends=True),
        conversion.code.splitlines(keepends=True),
        fromfile=before,
        tofile=after,
    )
    return "".join(lines)
