"""Writing a project safely: a fresh directory, executable launchers, and --force that never
overwrites what the user wrote or changed."""

from __future__ import annotations

import os

import pytest

from genie.errors import GenieError
from genie.generate import engine, write

from .conftest import spec_of, tree


@pytest.fixture
def files(cpu_machine):
    return engine.render(spec_of(cpu_machine))


def test_writes_a_fresh_directory_with_executable_launchers(tmp_path, files):
    target = tmp_path / "new" / "proj"
    write.write_project(target, files)
    assert tree(target) == files
    assert os.access(target / "launch" / "single_node.sh", os.X_OK)
    assert oct(target.stat().st_mode & 0o777) != oct(0o700)
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["proj"]  # no staging left


def test_a_non_empty_directory_is_refused_without_force(tmp_path, files):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(GenieError, match="is not empty; pick a new directory, or pass --force"):
        write.write_project(tmp_path, files)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_genie_project_is_recognised_and_the_way_to_regenerate_it_named(tmp_path, files):
    write.write_project(tmp_path / "proj", files)
    before = tree(tmp_path / "proj")
    with pytest.raises(GenieError) as refused:
        write.write_project(tmp_path / "proj", files)
    said = str(refused.value)
    assert "is a genie project already" in said and "is not empty" not in said
    assert f"--yes --answers {tmp_path / 'proj' / '.genie.yml'} --force" in said
    assert tree(tmp_path / "proj") == before  # nothing written


def test_force_adds_files_and_keeps_the_users_own(tmp_path, files):
    (tmp_path / "notes.txt").write_text("mine")
    write.write_project(tmp_path, files, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "train.py").read_bytes() == files["train.py"]


def test_force_never_overwrites_a_file_genie_did_not_write(tmp_path, files):
    (tmp_path / "train.py").write_text("my own training script\n")
    with pytest.raises(GenieError, match="will not overwrite .*train.py"):
        write.write_project(tmp_path, files, force=True)
    assert (tmp_path / "train.py").read_text() == "my own training script\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_force_never_overwrites_an_answers_file_genie_did_not_write(tmp_path, files):
    (tmp_path / ".genie.yml").write_text("my: notes\n")
    with pytest.raises(GenieError, match="will not overwrite .*\\.genie\\.yml"):
        write.write_project(tmp_path, files, force=True)
    assert (tmp_path / ".genie.yml").read_text() == "my: notes\n"


def test_force_refuses_a_generated_file_the_user_edited(tmp_path, cpu_machine, files):
    write.write_project(tmp_path, files)
    (tmp_path / "model.py").write_text("edited\n")
    other = engine.render(spec_of(cpu_machine, epochs=9))
    with pytest.raises(GenieError, match="will not overwrite .*model.py"):
        write.write_project(tmp_path, other, force=True)
    assert (tmp_path / "model.py").read_text() == "edited\n"


def test_force_regenerates_files_genie_wrote_and_nobody_changed(tmp_path, cpu_machine, files):
    write.write_project(tmp_path, files)
    other = engine.render(spec_of(cpu_machine, epochs=9))
    assert other["config.py"] != files["config.py"]  # the default epochs live there
    write.write_project(tmp_path, other, force=True)
    assert tree(tmp_path) == other


def test_a_file_in_the_way_of_the_target_is_refused(tmp_path, files):
    (tmp_path / "proj").write_text("a file")
    with pytest.raises(GenieError, match="exists and is not a directory"):
        write.write_project(tmp_path / "proj", files)
