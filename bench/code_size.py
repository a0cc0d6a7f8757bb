"""How long the generated training code is: train.py lines, the longest function and the
widest signature of each framework's project for every task written for it, beside the
targets (issue 10) and the PyTorch DDP tutorial and nanoGPT as baselines.

    python bench/code_size.py
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genie.detect import Machine  # noqa: E402
from genie.generate import engine
from genie.registry import FRAMEWORKS, TASKS  # noqa: E402
from genie.spec import build_spec  # noqa: E402

# train.py lines at most; every framework: functions of at most 60 lines, 6 parameters
TARGET_LINES = {"ddp": 400, "dp": 400, "lightning": 300, "hf": 300}
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6
BASELINES = (
    "pytorch/examples ddp-tutorial-series/multinode.py: about 100 lines (no checkpoint "
    "resume of the optimizer, no validation, no AMP)",
    "nanoGPT train.py: about 340 lines (DDP, AMP, checkpoints, eval)",
)


# every framework with every task written for it
COMBOS = [
    (framework, task)
    for framework in FRAMEWORKS
    for task, t in TASKS.items()
    if t.frameworks is None or framework in t.frameworks
]


@dataclass(frozen=True)
class Size:
    lines: int
    longest: tuple[str, int]  # function, lines
    widest: tuple[str, int]  # function, parameters


def functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def parameters(node: ast.FunctionDef) -> int:
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    names = [x for x in names if x.arg not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def measure(source: str) -> Size:
    tree = ast.parse(source)
    found = functions(tree)
    longest = max(found, key=lambda n: (n.end_lineno or n.lineno) - n.lineno + 1)
    widest = max(found, key=parameters)
    return Size(
        len(source.splitlines()),
        (longest.name, (longest.end_lineno or longest.lineno) - longest.lineno + 1),
        (widest.name, parameters(widest)),
    )


def project_sizes() -> dict[str, dict[str, Size]]:
    """Per framework and task written for it ("ddp-custom", ...): each generated Python
    module of its project with every other answer at its default, measured."""
    machine = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
    sizes = {}
    for framework, task in COMBOS:
        answers = {"name": "proj", "framework": framework, "task": task}
        files = engine.render(build_spec(answers, machine))
        sizes[f"{framework}-{task}"] = {
            path: measure(data.decode())
            for path, data in files.items()
            if path.endswith(".py") and not path.startswith("tests/")
        }
    return sizes


def problems(sizes: dict[str, dict[str, Size]]) -> list[str]:
    found = []
    for combo, modules in sizes.items():
        framework = combo.split("-")[0]
        if modules["train.py"].lines > TARGET_LINES[framework]:
            found.append(f"{combo} train.py: {modules['train.py'].lines} lines")
        for path, size in modules.items():
            if size.longest[1] > MAX_FUNCTION_LINES:
                found.append(f"{combo} {path}: {size.longest[0]} has {size.longest[1]} lines")
            if size.widest[1] > MAX_PARAMETERS:
                found.append(f"{combo} {path}: {size.widest[0]} takes {size.widest[1]} parameters")
    return found


def main() -> None:
    sizes = project_sizes()
    print("| framework-task | train.py lines (target) | longest function | most parameters |")
    print("|---|---|---|---|")
    for combo, modules in sizes.items():
        framework = combo.split("-")[0]
        every = modules.values()
        longest = max(every, key=lambda s: s.longest[1]).longest
        widest = max(every, key=lambda s: s.widest[1]).widest
        print(
            f"| {combo} | {modules['train.py'].lines} (<= {TARGET_LINES[framework]}) "
            f"| {longest[0]}: {longest[1]} (<= {MAX_FUNCTION_LINES}) "
            f"| {widest[0]}: {widest[1]} (<= {MAX_PARAMETERS}) |"
        )
    print("Baselines: " + "; ".join(BASELINES))
    found = problems(sizes)
    print("targets: " + ("met" if not found else "MISSED: " + "; ".join(found)))


if __name__ == "__main__":
    main()
