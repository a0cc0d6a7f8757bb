"""Rules every generated project keeps, checked over every golden variant (the goldens are
kept equal to what genie renders by test_render.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
VARIANTS = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
LOCAL_DEVICES = {"'cpu'", "device", "self.device", "run.device"}


def modules(variant: str) -> list[Path]:
    return sorted((GOLDEN / variant).rglob("*.py"))


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name
    ]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_torch_load_maps_to_cpu_and_loads_weights_only_where_it_can(variant):
    for path in modules(variant):
        source = path.read_text()
        lines = source.splitlines()
        for call in calls(ast.parse(source), "torch.load"):
            keywords = {k.arg: ast.unparse(k.value) for k in call.keywords}
            where = f"{path.relative_to(GOLDEN)}:{call.lineno}"
            # never onto GPU 0 from every rank: the CPU or this rank's own device
            assert keywords.get("map_location") in LOCAL_DEVICES, where
            if keywords.get("weights_only") != "True":
                # a full unpickle must say why, just above the call
                above = " ".join(lines[max(call.lineno - 4, 0) : call.lineno - 1])
                assert keywords.get("weights_only") == "False", where
                assert "weights-only" in above or "weights_only" in above, where


@pytest.mark.parametrize("variant", VARIANTS)
def test_faults_are_armed_in_smoke_mode_only(variant):
    train = GOLDEN / variant / "train.py"
    tree = ast.parse(train.read_text())
    armed = calls(tree, "smoke_check.arm_fault")
    assert len(armed) == 1, variant
    guards = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) == "args.smoke"
        and any(armed[0] is inner for inner in ast.walk(node))
    ]
    assert guards, f"{variant}: arm_fault outside `if args.smoke:`"
