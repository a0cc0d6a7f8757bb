"""A training loader whose sampler draws with replacement (``RandomSampler(...,
replacement=True)``, ``WeightedRandomSampler``, as small-GPT trainers and class-balanced
loaders use them) keeps its sampler: a DistributedSampler would change what it draws. Each
process draws its own share instead: ``num_samples`` divided by WORLD_SIZE
(``per_rank()``), from a generator seeded with the script's seed plus its RANK
(``rank_generator()``), so together the processes draw as many samples per epoch as the
one process did, each independently, as sampling with replacement does.

A sampler without replacement, with a generator of its own, or of a class genie does not
know stays a TODO (see :mod:`genie.convert.loaders`).
"""

from __future__ import annotations

import libcst as cst

from genie.convert.base import Context, assigned_once, code, dotted, keyword_arg, kwarg
from genie.i18n import _

HELPERS = '''

def per_rank(num_samples: int) -> int:
    """This process's share of the samples a sampler draws with replacement per epoch."""
    return -(-int(num_samples) // WORLD_SIZE)


def rank_generator() -> torch.Generator:
    """A generator of this process's own, from the script's seed and RANK: each process
    draws different samples."""
    return torch.Generator().manual_seed(torch.initial_seed() + RANK)
'''

# class -> positions of (replacement, num_samples, generator), and replacement's default
_SIGNATURES = {
    "RandomSampler": ((1, 2, 3), False),
    "WeightedRandomSampler": ((2, 1, 3), True),
}


def _arg(call: cst.Call, name: str, position: int) -> cst.Arg | None:
    found = kwarg(call, name)
    if found is not None:
        return found
    if any(a.star for a in call.args):
        return None  # *args or **kwargs: not known here
    plain = [a for a in call.args if a.keyword is None]
    return plain[position] if position < len(plain) else None


def drawn(module: cst.Module, loader: cst.Call) -> cst.Call | None:
    """The sampler of DataLoader ``loader`` (written inline or assigned once to a name) when
    it draws with replacement and brings no generator of its own."""
    given = kwarg(loader, "sampler")
    if given is None:
        return None
    value = assigned_once(module, given.value)
    if not isinstance(value, cst.Call) or any(a.star for a in value.args):
        return None
    signature = _SIGNATURES.get(dotted(value.func).rpartition(".")[2])
    if signature is None:
        return None
    (replacement, samples, generator), default = signature
    said = _arg(value, "replacement", replacement)
    if not (code(said.value) == "True" if said is not None else default):
        return None
    if _arg(value, "num_samples", samples) is None and not _named_source(value):
        return None  # its default count, len(data_source), must be written again
    return value if _arg(value, "generator", generator) is None else None


def _named_source(sampler: cst.Call) -> bool:
    """A RandomSampler's data source given as a name (``len(name)`` is then its count)."""
    source = _arg(sampler, "data_source", 0)
    return source is not None and isinstance(source.value, (cst.Name, cst.Attribute))


def rewrite(ctx: Context, original: cst.Call, updated: cst.Call, loader: str) -> cst.Call:
    """``num_samples`` -> ``per_rank(num_samples)``, and ``generator=rank_generator()``."""
    (_replacement, samples, _generator), _default = _SIGNATURES[
        dotted(updated.func).rpartition(".")[2]
    ]
    count = _arg(updated, "num_samples", samples)
    args = list(updated.args)
    if count is not None:
        shared = cst.parse_expression(f"per_rank({code(count.value)})")
        args[args.index(count)] = count.with_changes(value=shared)
    else:  # RandomSampler draws len(data_source) by default (a name: see drawn)
        data = code(_arg(updated, "data_source", 0).value)  # type: ignore[union-attr]
        args.append(keyword_arg("num_samples", f"per_rank(len({data}))"))
    args.append(keyword_arg("generator", "rank_generator()"))
    ctx.uses.add("per_rank")
    ctx.change(
        original,
        _(
            "{n} samples with replacement: each process draws its own 1/WORLD_SIZE share "
            "(per_rank()), from a generator seeded per rank (rank_generator())"
        ).format(n=loader),
    )
    return updated.with_changes(args=_commas(args))


def _commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """Every argument but the last with a comma (the last keeps whatever it had)."""
    fixed = []
    for i, arg in enumerate(args):
        if i < len(args) - 1 and arg.comma is cst.MaybeSentinel.DEFAULT:
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        fixed.append(arg)
    return fixed
