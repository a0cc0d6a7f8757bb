"""The registry's claim, tested: a framework is one registry entry plus its templates' folder.

A throwaway framework "ddp2" (ddp's entry under another key and other words, ddp's folder
copied) must render exactly what ddp renders, with its own words where ddp's stand: any
shared template that still names a framework, or reads a fact by the framework's key
instead of from its entry, makes the two differ.
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


# ddp2's entry differs from ddp's in a fact its README and train.py state: they must state
# ddp2's (a shared template that looked the fact up by framework key would state ddp's),
# and every other file is ddp's.
DDP2_FACTS = {"last_checkpoint": "checkpoints/LAST.pt"}


def in_own_words(path: str, data: bytes) -> bytes:
    """ddp's file as ddp2 must render it: ddp2's fact wherever genie states ddp's."""
    return data.replace(b"checkpoints/last.pt", b"checkpoints/LAST.pt")


@pytest.fixture
def ddp2(tmp_path, monkeypatch):
    """Register "ddp2" and render from a template copy that has frameworks/ddp2/."""
    copy = tmp_path / "template"
    shutil.copytree(engine.template_root(), copy)
    shutil.copytree(copy / "templates" / "frameworks" / "ddp", copy / "templates/frameworks/ddp2")
    monkeypatch.setattr(engine, "template_root", lambda: copy)
    entry = dataclasses.replace(registry.FRAMEWORKS["ddp"], key="ddp2", **DDP2_FACTS)
    monkeypatch.setitem(registry.FRAMEWORKS, "ddp2", entry)  # the dict every module reads
    for key, task in registry.TASKS.items():  # a task written for ddp is written for ddp2
        if task.frameworks and "ddp" in task.frameworks:
            task = dataclasses.replace(task, frameworks=(*task.frameworks, "ddp2"))
        if task.sharded_frameworks and "ddp" in task.sharded_frameworks:
            sharded = (*task.sharded_frameworks, "ddp2")
            task = dataclasses.replace(task, sharded_frameworks=sharded)
        monkeypatch.setitem(registry.TASKS, key, task)
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
    records = (".genie.yml", ".genie/base.tar.gz")  # hashes and an archive of the files
    differ = [p for p in copy if p not in records and copy[p] != in_own_words(p, ddp[p])]
    assert differ == []
    if strategy == "ddp":  # FSDP checkpoints are step folders, whatever the framework's fact
        assert copy["README.md"] != ddp["README.md"]  # ddp2's fact is stated
    assert b'framework: "ddp2"\n' in copy[".genie.yml"]
    for path, data in copy.items():
        if path.endswith(".py"):
            assert black.format_str(data.decode(), mode=black.Mode()) == data.decode(), path
    write.write_project(tmp_path / "p", copy)
    result = ruff_generated(tmp_path / "p")
    assert result.returncode == 0, result.stdout + result.stderr


# A framework named in a shared template: g.framework compared with a name (== "ddp",
# in (...)) or used as a key ({...}[g.framework], fw.key), or a framework's key quoted
# inside a Jinja tag ({"hf": ...}.get(...)); "frameworks/" ~ g.framework ~ "/..." is a path.
# g.strategy == "ddp" is the strategy, not the framework.
NAMES_A_FRAMEWORK = re.compile(
    r"g\.framework\s*(==|!=|\bnot in\b|\bin\b)|\[\s*g\.framework\s*\]|\bfw\.key\b"
    r"|[{][{%][^}]*(?<!strategy == )[\"'](" + "|".join(registry.FRAMEWORKS) + r")[\"'][^}]*[%}][}]"
)


def test_the_framework_check_can_fail():
    for line in (
        '{{ {"hf": "`checkpoint-N`"}.get(g.fw.key, "`last.pt`") }}',
        "{% if g.framework == 'lightning' %}",
        '{% if g.fw.key in ("dp",) %}',
        "{{ names[g.framework] }}",
    ):
        assert NAMES_A_FRAMEWORK.search(line), line
    for line in (
        '{% include "frameworks/" ~ g.framework ~ "/x.j2" %}',
        '{% if g.strategy == "ddp" %}',
    ):
        assert not NAMES_A_FRAMEWORK.search(line), line


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
