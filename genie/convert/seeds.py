"""How the script seeds its random numbers, for the report: each process builds its models
from its own random numbers, so without one fixed seed their initial weights differ, and it is
DDP's broadcast of rank 0's weights, when it wraps each model after its last initialisation,
that makes them identical. And what it draws while it trains: those draws (random batches,
noise) must then differ per rank, so after the last wrap each rank reseeds (seed + RANK)."""

from __future__ import annotations

import libcst as cst

from genie.convert.base import calls, code, method_calls, walk

SEEDS = ("torch.manual_seed", "manual_seed", "seed_everything", "set_seed")
# Draws from a global generator: batches picked at random, noise, masks.
TORCH_DRAWS = ("rand", "randn", "randint", "randperm", "multinomial", "rand_like",
               "randn_like", "randint_like", "bernoulli", "normal")  # fmt: skip
PY_DRAWS = ("random", "randint", "randrange", "choice", "choices", "sample", "shuffle",
            "uniform", "gauss")  # fmt: skip
NUMPY_DRAWS = (*PY_DRAWS, "rand", "randn", "permutation", "normal", "integers")


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


def draws(module: cst.Module) -> dict[str, str]:
    """The global generators the script draws from while it trains (in a loop that calls
    backward(), or in a function called there: batches picked at random, noise), each by
    the name it calls it: {"torch": "torch", "numpy": "np", "random": "random"}."""
    loops = [n for n in walk(module) if isinstance(n, (cst.For, cst.While))]
    return loop_draws(module, [loop for loop in loops if method_calls(loop.body, "backward")])


def loop_draws(module: cst.Module, training: list[cst.CSTNode]) -> dict[str, str]:
    """What :func:`draws` finds in the loops ``training`` and the functions they call."""
    called = {code(c.func) for loop in training for c in walk(loop) if isinstance(c, cst.Call)}
    helpers = [n for n in walk(module) if isinstance(n, cst.FunctionDef) and n.name.value in called]
    found: dict[str, str] = {}
    for call in (c for node in training + helpers for c in walk(node) if isinstance(c, cst.Call)):
        parts = code(call.func).split(".")
        if len(parts) == 2 and parts[0] == "torch" and parts[1] in TORCH_DRAWS:
            found["torch"] = "torch"
        elif len(parts) == 2 and parts[0] == "random" and parts[1] in PY_DRAWS:
            found["random"] = "random"
        elif len(parts) == 3 and parts[1] == "random" and parts[2] in NUMPY_DRAWS:
            found["numpy"] = parts[0]
    return found


def each_rank(used: dict[str, str]) -> str:
    """``seed_each_rank()``: after the last wrap every rank draws its own numbers."""
    lines = ["    torch.manual_seed(seed)"]
    if "random" in used:
        lines.append("    random.seed(seed)")
    if "numpy" in used:
        lines.append(f"    {used['numpy']}.random.seed(seed % 2**32)")
    body = "\n".join(lines)
    return f'''

def seed_each_rank() -> None:
    """From here on every rank draws its own random numbers (batches picked at random,
    noise, dropout): DDP has just made the weights the same on every rank."""
    seed = torch.initial_seed() + RANK
{body}
'''
