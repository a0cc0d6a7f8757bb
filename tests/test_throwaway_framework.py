"""The registry's claim, tested: a framework is one registry entry plus its templates' folder.

A throwaway framework "ddp2" (ddp's entry under another key, ddp's folder copied) must
render exactly what ddp renders: any shared template that still names a framework, or any
genie code that does, makes the two differ.
"""

from __future__ import annotations

import dataclasses
import re
import shutil

import black
import pytest

from genie import registry
from genie.generate import engine, write
from genie.spec import build, build_spec

from .conftest import ROOT, ruff_generated

TEMPLATES = ROOT / "templates" / "project" / "templates"


@pytest.fixture
def ddp2(tmp_path, monkeypatch):
    """Register "ddp2" and render from a template copy that has frameworks/ddp2/."""
    copy = tmp_path / "template"
    shutil.copytree(engine.template_root(), copy)
    shutil.copytree(copy / "templates" / "frameworks" / "ddp", copy / "templates/frameworks/ddp2")
    monkeypatch.setattr(engine, "template_root", lambda: copy)
    entry = dataclasses.replace(registry.FRAMEWORKS["ddp"], key="ddp2")
    monkeypatch.setitem(registry.FRAMEWORKS, "ddp2", entry)  # the dict every module reads
    # The field table copied the choices when it was built, at import time.
    fields = tuple(
        (
            dataclasses.replace(f, choices=(*f.choices, "ddp2"))
            if f.name == "framework" and f.choices
            else f
        )
        for f in build.FIELDS
    )
    monkeypatch.setattr(build, "FIELDS", fields)
    by_name = {f.name: f for f in fields}
    monkeypatch.setitem(build.FIELD_BY_NAME, "framework", by_name["framework"])
    return "ddp2"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("task", list(registry.TASKS))
def test_a_copied_framework_renders_what_its_original_renders(
    ddp2, cpu_machine, tmp_path, task, strategy
):
    answers = {"name": "proj", "task": task, "strategy": strategy}
    ddp = engine.render(build_spec({**answers, "framework": "ddp"}, cpu_machine))
    copy = engine.render(build_spec({**answers, "framework": ddp2}, cpu_machine))
    assert copy.keys() == ddp.keys()
    assert [path for path in copy if copy[path] != ddp[path] and path != ".genie.yml"] == []
    assert copy[".genie.yml"] == ddp[".genie.yml"].replace(
        b'framework: "ddp"\n', b'framework: "ddp2"\n'
    )  # the answers name the key; every file's hash is the same
    for path, data in copy.items():
        if path.endswith(".py"):
            assert black.format_str(data.decode(), mode=black.Mode()) == data.decode(), path
    write.write_project(tmp_path / "p", copy)
    result = ruff_generated(tmp_path / "p")
    assert result.returncode == 0, result.stdout + result.stderr


# g.framework compared with a name (== "ddp", != "dp", in ("lightning", "hf")), or a table
# looked up by it ({...}[g.framework]); "frameworks/" ~ g.framework ~ "/..." is a path
NAMES_A_FRAMEWORK = re.compile(r"g\.framework\s*(==|!=|\bnot in\b|\bin\b)|\[\s*g\.framework\s*\]")


def test_no_template_outside_a_frameworks_folder_names_a_framework():
    shared = [
        path
        for path in (ROOT / "templates" / "project").rglob("*")
        if path.is_file() and path.parent.parent.name != "frameworks"  # not frameworks/<key>/
    ]
    assert len(shared) > 20
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in shared
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if NAMES_A_FRAMEWORK.search(line)
    ]
    assert offenders == []
