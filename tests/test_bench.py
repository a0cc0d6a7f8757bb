"""The benchmarks call into generated projects: what they call must exist there.
(bench/throughput.py called a train.py function the ddp template had lost, unnoticed for
several releases; a real benchmark run takes minutes, so it is not run here.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from . import goldens
from .conftest import ROOT

PROJECTS = {"ddp": "cpu-default", "lightning": "lightning-custom", "hf": "hf-custom"}


def top_level_names(path: Path) -> set[str]:
    """What a module defines or imports at its top level."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


def test_what_bench_throughput_calls_in_a_generated_train_py_exists_there():
    source = (ROOT / "bench" / "throughput.py").read_text()
    # the ddp job's own calls, in its branch of worker(); the rest every framework's
    ddp_branch = source.split('if framework == "ddp":', 1)[1].split("\n    else:", 1)[0]
    # --task llm: the llm project (ddp) also sizes the baseline's vocabulary
    llm_branch = source.split("    if llm:", 1)[1].split("\n    if ", 1)[0]
    calls = r"generated\.(\w+)(?:\.(\w+))?"
    common = set(re.findall(calls, source.replace(ddp_branch, "").replace(llm_branch, "")))
    ddp = common | set(re.findall(calls, ddp_branch))
    llm = ddp | set(re.findall(calls, llm_branch))
    assert ("dist_utils", "setup") in ddp and ("build_run", "") in ddp and ("train", "") in common
    assert ("data", "smoke_tokenizer") in llm
    for framework, variant in {**PROJECTS, "llm": "ddp-llm"}.items():
        project = goldens.files(variant)
        defined = top_level_names(project["train.py"])
        for name, inner in {"ddp": ddp, "llm": llm}.get(framework, common):
            assert name in defined, (framework, name)
            if inner:  # an attribute of a module train.py imports (dist_utils.setup)
                module = project[f"{name}.py"]
                assert inner in top_level_names(module), (framework, f"{name}.{inner}")


def test_what_bench_fsdp_checkpoints_calls_in_a_generated_fsdp_project_exists_there():
    source = (ROOT / "bench" / "fsdp_checkpoints.py").read_text()
    drive = source.split('DRIVE = r"""', 1)[1].split('"""', 1)[0]
    project = goldens.files("fsdp-ddp-custom")
    modules = {"checkpoint", "config", "dist_utils", "fsdp", "optim"}
    called = set(re.findall(r"\b(" + "|".join(modules) + r")\.(\w+)\(", drive))
    assert ("checkpoint", "save") in called and ("fsdp", "build_sharded") in called
    for name, inner in called:
        assert inner in top_level_names(project[f"{name}.py"]), f"{name}.{inner}"
