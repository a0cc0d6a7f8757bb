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


def test_packages_import_their_stages_downstream_only():
    """A smoke runner never builds files, generation never runs a smoke test, and nothing
    below the CLI imports it."""
    edges = graph()
    for name, targets in edges.items():
        if not name.startswith(("genie.cli", "genie.__main__")):
            assert not {t for t in targets if t.startswith("genie.cli")}, name
        if name.startswith("genie.generate"):
            assert {t for t in targets if t.startswith("genie.smoke")} <= {"genie.smoke.contract"}
        if name.startswith(("genie.spec", "genie.generate")):
            assert not {t for t in targets if t.startswith(("genie.doctor", "genie.convert"))}


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
