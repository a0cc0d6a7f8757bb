"""How the script seeds its random numbers, for the report: each process builds its models
from its own random numbers, so without one fixed seed their initial weights differ, and it is
DDP's broadcast of rank 0's weights, when it wraps each model after its last initialisation,
that makes them identical."""

from __future__ import annotations

import libcst as cst

from genie.convert.base import calls, code, walk

SEEDS = ("torch.manual_seed", "manual_seed", "seed_everything", "set_seed")


def seeding(module: cst.Module) -> str:
    """ "fixed", "random" (from random numbers or the time) or "none"."""
    seeded = calls(module, *SEEDS)
    if not seeded:
        return "none"
    random_names: set[str] = set()
    for node in walk(module):
        if isinstance(node, cst.Assign) and _random(node.value):
            random_names.update(code(t.target) for t in node.targets)
    for call in seeded:
        args = [a.value for a in call.args]
        if not args or any(_random(a) or code(a) in random_names for a in args):
            return "random"
    return "fixed"


def _random(node: cst.BaseExpression) -> bool:
    text = code(node)
    return "rand" in text or "time" in text
