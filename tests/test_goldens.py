"""The golden store (tests/goldens.py): each distinct file once, a map of who has which, and a
check that fails on any change. test_render.py compares every variant with it."""

from __future__ import annotations

from . import goldens
from .conftest import render_variant, tree
from .variants import VARIANTS

SHARED = b"the same in both\n"
PROJECTS = {
    "first": {"train.py": b"first's\n", "launch/run.sh": SHARED, "README.md": b"one\n"},
    "second": {"train.py": b"second's\n", "launch/run.sh": SHARED},
}


def test_each_distinct_file_is_stored_once_under_the_first_variant_that_has_it(tmp_path):
    goldens.store(PROJECTS, tmp_path)
    assert tree(tmp_path / goldens.FILES) == {
        "README.md/first": b"one\n",
        "launch/run.sh/first": SHARED,
        "train.py/first": b"first's\n",
        "train.py/second": b"second's\n",
    }
    lines = (tmp_path / goldens.MAP).read_text().splitlines()
    assert [x for x in lines if not x.startswith("#")] == [
        "README.md first first",
        "launch/run.sh first first",
        "launch/run.sh second first",
        "train.py first first",
        "train.py second second",
    ]
    for variant, files in PROJECTS.items():
        assert goldens.differences(variant, files, tmp_path) == []
        assert tree(goldens.unpack(variant, tmp_path / "out" / variant, tmp_path)) == files


def test_a_change_every_variant_shares_edits_one_file_and_unused_ones_are_removed(tmp_path):
    goldens.store(PROJECTS, tmp_path)
    changed = {v: {**files, "launch/run.sh": b"changed\n"} for v, files in PROJECTS.items()}
    changed["first"] = {p: d for p, d in changed["first"].items() if p != "README.md"}
    changed["second"]["train.py"] = b"first's\n"
    goldens.store(changed, tmp_path)
    assert tree(tmp_path / goldens.FILES) == {
        "launch/run.sh/first": b"changed\n",
        "train.py/first": b"first's\n",
    }
    assert not (tmp_path / goldens.FILES / "README.md").exists()  # no empty folder left
    assert goldens.unused(tmp_path) == []
    assert goldens.read_map(tmp_path)["second"] == {"launch/run.sh": "first", "train.py": "first"}


def test_the_check_names_the_variant_and_path_of_every_difference(tmp_path):
    goldens.store(PROJECTS, tmp_path)
    rendered = {"train.py": b"first's, edited\n", "launch/run.sh": SHARED, "extra.py": b"\n"}
    found = goldens.differences("first", rendered, tmp_path)
    assert found[0] == "first: README.md has a golden (%s) but is not rendered" % (
        tmp_path / "files" / "README.md" / "first"
    )
    assert found[1] == "first: extra.py is rendered but has no golden"
    assert found[2].startswith("first: train.py differs from ")
    assert "    -first's" in found and "    +first's, edited" in found
    (tmp_path / goldens.FILES / "launch" / "run.sh" / "first").unlink()
    assert goldens.differences("second", PROJECTS["second"], tmp_path) == [
        f"second: launch/run.sh: the map names {tmp_path}/files/launch/run.sh/first, which is missing"
    ]


def test_the_real_goldens_catch_a_mutated_render():
    rendered = goldens.kept(render_variant("cpu-default"))
    assert goldens.differences("cpu-default", rendered) == []
    mutated = dict(rendered)
    mutated["checkpoint.py"] = mutated["checkpoint.py"].replace(b"os.replace", b"os.rename", 1)
    del mutated["README.md"]
    mutated["launch/extra.sh"] = b"#!/bin/sh\n"
    found = goldens.differences("cpu-default", mutated)
    assert found[0] == (
        "cpu-default: README.md has a golden (tests/golden/files/README.md/cpu-default) but is "
        "not rendered"
    )
    assert found[1] == (
        "cpu-default: checkpoint.py differs from tests/golden/files/checkpoint.py/cpu-default:"
    )
    assert any(line.startswith("    +") and "os.rename" in line for line in found)
    assert found[-1] == "cpu-default: launch/extra.sh is rendered but has no golden"


def test_the_goldens_hold_every_variant_and_no_file_nobody_has():
    assert goldens.variants() == sorted(VARIANTS)
    assert goldens.unused() == []
