"""The house rules of genie's own code (CONTRIBUTING.md): packages by stage with no import
cycle, small modules, small functions with few positional parameters."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import ROOT

PACKAGE = ROOT / "genie"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60
MAX_POSITIONAL = 6


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",):
            skipped |= {id(n) for n in ast.walk(node)}
    return skipped


def imports(path: Path, known: set[str]) -> set[str]:
    """The genie modules ``path`` imports, at module level or inside functions alike (an
    import moved into a function to dodge a cycle is still a cycle)."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
    return {name for name in found if name in known} - {module_name(path)}


def graph() -> dict[str, set[str]]:
    known = set(modules())
    return {name: imports(path, known) for name, path in modules().items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, each once (depth-first search over the graph)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_genie_has_no_import_cycle():
    assert cycles(graph()) == []


def test_the_cycle_check_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


# genie's stages from the bottom up. A module imports only from the layers below its own
# (and from its own stage): stages side by side in one layer never import each other, and
# nothing imports upwards, so the smoke runner never builds files, generation never runs a
# smoke test, and nothing below the CLI imports it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("genie", "genie.cjk"),  # the package itself holds only __version__
    ("genie.i18n",),
    ("genie.errors", "genie.scratch", "genie.contract", "genie.registry", "genie.detect"),
    ("genie.compat",),
    ("genie.spec",),
    ("genie.prompts",),
    ("genie.ui", "genie.wizard"),
    ("genie.plan",),
    ("genie.generate",),
    ("genie.upgrade",),
    ("genie.smoke",),
    ("genie.doctor",),
    ("genie.convert",),
    ("genie.cli",),
    ("genie.__main__",),
)


def stage(module: str) -> str:
    """The stage a module belongs to: its subpackage under genie, or the module itself."""
    return ".".join(module.split(".")[:2])


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a stage not below the importer's own layer, as 'a -> b'."""
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    found = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            here, there = stage(name), stage(target)
            if here != there and layer[there] >= layer[here]:
                found.append(f"{name} -> {target}")
    return found


def test_every_stage_has_a_layer():
    assert {stage(name) for name in modules()} == {s for names in LAYERS for s in names}


def test_stages_import_only_the_layers_below_them():
    assert upward_imports(graph()) == []


def test_the_layer_check_can_fail():
    edges = {"genie.spec.build": {"genie.smoke.plan"}, "genie.smoke.plan": {"genie.spec"}}
    assert upward_imports(edges) == ["genie.spec.build -> genie.smoke.plan"]
    # side by side in one layer is not below either
    assert upward_imports({"genie.ui": {"genie.wizard"}}) == ["genie.ui -> genie.wizard"]


# Where genie may end its own process: cli.main, the one place an error becomes a message
# and an exit status, and the convert probe, which runs a user's script as a program of its
# own (``python -m genie.convert.probe``) and exits with that script's status.
EXITS_ALLOWED = {"genie.cli", "genie.convert.probe"}


def exits(source: str) -> list[str]:
    """Each place ``source`` ends the process or sets an exit status by number."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "sys.exit",
            "exit",
            "os._exit",
        ):
            found.append(f"{ast.unparse(node.func)} at line {node.lineno}")
        elif isinstance(node, ast.Raise) and node.exc is not None:
            if ast.unparse(node.exc).startswith("SystemExit"):
                found.append(f"raise SystemExit at line {node.lineno}")
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "exit_code":
            if isinstance(node.value, ast.Constant):
                found.append(f"exit_code = {node.value.value} at line {node.lineno}")
    return sorted(found)


def test_only_the_cli_ends_genie_with_the_statuses_of_errors_py():
    found = {
        name: exits(path.read_text())
        for name, path in modules().items()
        if name not in EXITS_ALLOWED | {"genie.errors"}
    }
    assert {name: where for name, where in found.items() if where} == {}


def test_the_exit_check_can_fail():
    source = "import sys\nclass E:\n    exit_code = 3\ndef f():\n    sys.exit(1)\n    raise SystemExit(2)\n"
    assert sorted(exits(source)) == [
        "exit_code = 3 at line 3",
        "raise SystemExit at line 6",
        "sys.exit at line 5",
    ]


def test_every_module_is_small():
    sizes = {name: len(p.read_text().splitlines()) for name, p in modules().items()}
    assert {k: n for k, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def _is_click_command(node: ast.FunctionDef) -> bool:
    """click command functions take one parameter per option: their shape is click's."""
    return any(
        isinstance(d, ast.Call) and ast.unparse(d.func).endswith((".command", ".group"))
        for d in node.decorator_list
    )


def oversized(source: str) -> list[str]:
    """Functions over the line limit, or with more positional parameters than allowed."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_click_command(node):
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        positional = [a for a in node.args.posonlyargs + node.args.args if a.arg != "self"]
        if lines > MAX_FUNCTION_LINES:
            found.append(f"{node.name}: {lines} lines")
        if len(positional) > MAX_POSITIONAL:
            found.append(f"{node.name}: {len(positional)} positional parameters")
    return found


@pytest.mark.parametrize("name", sorted(modules()))
def test_every_function_is_small_with_few_positional_parameters(name):
    assert oversized(modules()[name].read_text()) == []


def test_the_function_check_can_fail():
    source = "def f(a, b, c, d, e, f, g, *, h):\n" + "    x = 1\n" * 60
    assert oversized(source) == ["f: 61 lines", "f: 7 positional parameters"]
    assert oversized("def g(a, b, c, d, e, f, *, g, h): pass\n") == []
