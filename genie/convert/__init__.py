"""``genie convert``: a single-device training script -> a DDP script for torchrun.

:func:`convert` is pure: source text in, converted text and the list of changes out. Each
rewrite is a small libcst transformer in its own module, applied in this order: device,
model, loaders, rank 0, then the process-group setup around everything. libcst keeps the
script's comments and layout; black formats the result when the script was black-formatted.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from genie.convert.base import Change
from genie.errors import GenieError
from genie.i18n import N_, _

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

    @property
    def todos(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.todo)


def convert(source: str, script: str = "script.py") -> Conversion:
    """Convert ``source`` (the text of ``script``); GenieError when it must not be."""
    import black
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from genie.convert import base, refuse, seeds

    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as err:
        raise GenieError(
            _("{s} is not valid Python: line {l}: {m}").format(
                s=script, l=err.raw_line, m=err.message
            )
        ) from None
    tree = wrapper.module
    refuse.check(tree, script)
    ctx = base.Context(positions=wrapper.resolve(PositionProvider))
    ctx.facts["names"] = {n.value for n in base.walk(tree) if isinstance(n, cst.Name)}
    ctx.facts["seeding"] = seeds.seeding(tree)  # unseeded: rank 0's seed on every rank
    ctx.facts["draws"] = seeds.draws(tree)
    ctx.facts["functions"] = {
        n.name.value for n in base.walk(tree) if isinstance(n, (cst.FunctionDef, cst.ClassDef))
    }
    tree, found, split = _rewrite(tree, ctx)
    mode = _black_mode(source)
    text = black.format_str(tree.code, mode=mode) if mode else tree.code
    changes = tuple(sorted(ctx.changes, key=lambda c: (c.line, c.todo)))
    return Conversion(
        source,
        text,
        changes,
        found.batch,
        tuple(found.evaluation),
        split=split,
        seeds=ctx.facts["seeding"],
    )


def _rewrite(tree: Any, ctx: Any) -> tuple[Any, Any, bool]:
    """Every rewrite, in order; the tree, the loaders found, and whether data is split."""
    from genie.convert import batches, decisions, device, loaders, model, placement, rank0, setup

    tree = tree.visit(device.DeviceRewrite(ctx))
    tree = tree.visit(model.ModelRewrite(ctx, model.find(tree)))
    found = loaders.find(tree)
    tree = tree.visit(loaders.LoaderRewrite(ctx, found))
    hand = batches.find(tree, loaders.known_data(tree))
    tree = tree.visit(batches.HandBatchRewrite(ctx, hand))
    tree = tree.visit(
        rank0.Rank0Rewrite(ctx, barrier=rank0.reads_files(tree), loggers=rank0.loggers(tree))
    )
    tree = rank0.merge_guards(tree)
    tree = tree.visit(decisions.DecisionRewrite(ctx, placement.trainers(tree)))
    tree = setup.apply(tree, ctx)
    if "DDP" not in ctx.uses:
        ctx.todo(
            tree,
            _(
                "found no model to wrap in DDP (it is built where genie cannot see): wrap it "
                "once it is on DEVICE, DDP(model, device_ids=[LOCAL_RANK])"
            ),
        )
    split = bool(ctx.uses & {"DistributedSampler", "shard", "per_rank", "RankShard"})
    split = (split or hand.drawn) and not hand.todo
    if not split and not any(change.todo for change in ctx.changes):
        ctx.todo(
            tree,
            _(
                "found no training data to split across the processes (no DataLoader, no "
                "training loop in this script): every process would train on the same data"
            ),
        )
    return tree, found, split


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


# What the report says of the script's seeds, where it sets none or a random one
SEEDS = {
    "random": N_(
        "Seeds: the script seeds from random numbers, so each process builds different "
        "initial weights; DDP broadcasts rank 0's weights when it wraps each model after its "
        "last initialisation or load, so every process starts from the same weights."
    ),
    "none": N_(
        "Seeds: the script sets no seed, so every process takes rank 0's random seed when it "
        "joins the process group (shared_seed()): what it draws with torch from there on "
        "(synthetic data, targets, initial weights) is the same on every process, not what "
        "it draws with NumPy or random, nor at import above the main block."
    ),
}


def report(conversion: Conversion, script: str, nproc: int, nodes: int = 1) -> list[str]:
    """The numbered list of changes (lines of ``script``), then what the user should know."""
    out = []
    merged: dict[tuple[int, bool], list[str]] = {}
    for change in conversion.changes:
        whats = merged.setdefault((change.line, change.todo), [])
        if change.what not in whats:
            whats.append(change.what)
    for number, ((line, todo), whats) in enumerate(merged.items(), 1):
        mark = "TODO " if todo else ""
        where = _("line {n}").format(n=line) if line else script
        out.append(f"{number:>3}. {mark}{where}: " + "; ".join(whats))
    world = nproc * nodes
    if not conversion.split:
        out.append(
            _(
                "Batch: genie split no training data across the processes (see the TODOs): "
                "until it is, all {w} processes train on the same batches."
            ).format(w=world)
        )
    elif conversion.batch is None:
        out.append(
            _(
                "Batch: each process keeps its batch size, so {w} processes train on {w} times "
                "the batch per step; the learning rate is unchanged: consider scaling it "
                "(linearly, with warmup) or dividing the per-process batch by {w}."
            ).format(w=world)
        )
    else:
        out.append(
            _(
                "Batch: {b} per process, so {w} processes train on a global batch of {w} x {b} "
                "per step; the learning rate is unchanged: if it was tuned for batch {b}, "
                "consider scaling it (linearly, with warmup) or keeping the global batch by "
                "dividing the per-process batch by {w}."
            ).format(b=conversion.batch, w=world)
        )
    if conversion.seeds != "fixed":
        out.append(_(SEEDS[conversion.seeds]))
    for name in conversion.evaluation:
        out.append(
            _(
                "Evaluation: {n} is left whole: every process evaluates all of it with the same "
                "parameters (the single-process metric); rank 0 prints it."
            ).format(n=name)
        )
    return out
