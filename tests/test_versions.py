"""Every supported torch minor x framework renders code that uses only that version's APIs."""

from __future__ import annotations

import ast

import pytest

from genie import compat, render
from genie.detect import Machine
from genie.spec import build_spec

MACHINE = Machine(gpus=0, torch=None, python="3.11", hostname="node0")
FRAMEWORKS = ("ddp", "lightning", "hf", "dp")


def python_for(release: compat.TorchRelease) -> str:
    """A Python every library line supports with this torch (3.10 where it can)."""
    return compat.format_minor(max(release.python_min, min((3, 10), release.python_max)))


def attribute_names(source: str) -> set[str]:
    return {ast.unparse(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}


def call_keywords(source: str, func: str) -> set[str]:
    return {
        kw.arg
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == func
        for kw in n.keywords
    }


@pytest.mark.parametrize("release", compat.RELEASES, ids=lambda r: r.minor)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_generated_code_follows_the_version_rules(release, framework):
    spec = build_spec(
        {
            "name": "p",
            "torch": release.minor,
            "python": python_for(release),
            "framework": framework,
        },
        MACHINE,
    )
    files = render.render(spec)
    source = files["train.py"].decode()
    names = attribute_names(source)
    version = release.version
    for path, data in files.items():
        if path.endswith(".py"):
            compile(data.decode(), path, "exec")
    assert ("torch.compile" in names) is (version >= (2, 0) and framework != "hf")
    if framework in ("ddp", "dp"):
        assert ("torch.amp.GradScaler" in names) is (version >= (2, 3))
        assert ("torch.cuda.amp.GradScaler" in names) is (version < (2, 3))
    if framework == "ddp":
        assert ("device_id" in call_keywords(source, "dist.init_process_group")) is (
            version >= (2, 3)
        )
    requirements = files["requirements.txt"].decode()
    assert f"torch>={release.minor},<" in requirements
    assert ("numpy<2" in requirements) is (version < (2, 3))
