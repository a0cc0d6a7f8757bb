"""The code a user takes away: a train.py that reads in one sitting, with genie's own
smoke harness in smoke_check.py, imported only under --smoke (bench/code_size.py)."""

from __future__ import annotations

import ast
import importlib.util
import sys

import pytest

from .conftest import ROOT


@pytest.fixture(scope="module")
def code_size():
    spec = importlib.util.spec_from_file_location("code_size", ROOT / "bench" / "code_size.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_size"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sizes(code_size):
    return code_size.project_sizes()


def test_train_py_meets_its_size_targets_in_every_framework(code_size, sizes):
    assert code_size.problems(sizes) == []
    assert {combo.split("-")[0] for combo in sizes} == {"ddp", "lightning", "hf", "dp"}
    assert {"ddp-llm", "lightning-llm", "hf-llm", "hf-custom"} <= set(sizes)


def test_the_size_check_can_fail(code_size, sizes):
    long_source = "def f(a, b, c, d, e, f, g):\n" + "    x = 1\n" * 70
    size = code_size.measure(long_source)
    assert size.longest == ("f", 71) and size.widest == ("f", 7)
    broken = {"ddp-custom": {**sizes["ddp-custom"], "train.py": size}}
    assert len(code_size.problems(broken)) == 2


@pytest.mark.parametrize("framework", ["ddp", "lightning", "hf", "dp"])
def test_smoke_harness_lives_in_smoke_check_imported_only_under_smoke(framework, cpu_machine):
    from genie.generate import engine
    from genie.spec import build_spec

    files = engine.render(build_spec({"name": "p", "framework": framework}, cpu_machine))
    train = files["train.py"].decode()
    for harness in ("GENIE_SMOKE", "params_in_sync", "holds_exactly", "checkpoint_loads"):
        assert harness not in train, harness
    assert "params_in_sync" in files["smoke_check.py"].decode()
    # the only import of smoke_check sits inside an `if args.smoke:` block
    tree = ast.parse(train)
    guarded = [
        node
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and ast.unparse(branch.test) == "args.smoke"
        for node in ast.walk(branch)
        if isinstance(node, ast.Import) and node.names[0].name == "smoke_check"
    ]
    every = [
        n for n in ast.walk(tree) if isinstance(n, ast.Import) and n.names[0].name == "smoke_check"
    ]
    assert len(guarded) == len(every) == 1
