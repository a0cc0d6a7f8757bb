"""A project appears whole or not at all: genie killed while rendering or writing, Ctrl-C in
the wizard, and --force next to the user's own files."""

from __future__ import annotations

import hashlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from genie import cli
from genie.spec.answers import ANSWERS_FILE

from .conftest import GENIE, run_genie, tree, wizard_raises


def start_paused(cwd: Path, point: str, *args: str) -> subprocess.Popen:
    """Start ``genie new`` and return once it has stopped at the pause point ``point``."""
    env = {
        **os.environ, "NO_COLOR": "1", "GENIE_TEST_PAUSE_AT": point,
        "TMPDIR": str(cwd / "tmp"),  # cookiecutter's render dir, which a SIGKILL leaves
    }  # fmt: skip
    (cwd / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [*GENIE, "new", "proj", "--yes", "--no-smoke", *args],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        # Ctrl-C reaches it even where pytest runs as a shell's background job (SIGINT ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        ready, _w, _x = select.select([proc.stderr], [], [], 1)
        if ready:
            line = proc.stderr.readline()
            if line == f"GENIE_TEST_PAUSED {point}\n":
                return proc
            assert line, f"genie exited before reaching {point}"
    proc.kill()
    raise AssertionError(f"genie never reached {point}")


def assert_complete(project: Path) -> None:
    """Every file the answers file lists is there with the content genie recorded."""
    answers = yaml.safe_load((project / ANSWERS_FILE).read_text())
    files = answers["files"]
    assert {"train.py", "README.md", "launch/single_node.sh"} <= set(files)
    for path, digest in files.items():
        assert hashlib.sha256((project / path).read_bytes()).hexdigest() == digest, path


def staging_dirs(parent: Path) -> list[Path]:
    return list(parent.glob(".proj.genie-*"))


@pytest.mark.parametrize("point", ["render", "staging", "rename"])
def test_killed_while_generating_leaves_no_project_and_a_rerun_cleans_up(tmp_path, point):
    proc = start_paused(tmp_path, point)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "proj").exists()  # absent, never half written
    left = list((tmp_path / "tmp").glob("genie-*"))  # what the killed genie could not remove
    assert left or point != "render"
    again = run_genie("new", "proj", "--yes", "--no-smoke", cwd=tmp_path,
                      TMPDIR=str(tmp_path / "tmp"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert_complete(tmp_path / "proj")
    assert staging_dirs(tmp_path) == []  # the killed run's staging directory is gone
    assert list((tmp_path / "tmp").glob("genie-*")) == []  # and its render directory


def test_the_sweep_removes_only_directories_of_dead_genies(tmp_path, monkeypatch):
    from genie import scratch

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process now
    mine = tmp_path / f"genie-smoke-{os.getpid()}-abc"
    theirs = tmp_path / f"genie-render-{dead.pid}-xyz"
    other = tmp_path / "genie-notes"
    for folder in (mine, theirs, other):
        folder.mkdir()
    (theirs / "train.py").write_text("x")
    assert scratch.sweep() == [theirs]
    assert mine.is_dir() and other.is_dir() and not theirs.exists()
    with scratch.directory("render") as made:
        assert Path(made).name.startswith(f"genie-render-{os.getpid()}-")


def test_killed_during_force_leaves_whole_files_and_force_finishes(tmp_path):
    first = run_genie("new", "proj", "--yes", "--no-smoke", "--epochs", "3", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "proj" / "notes.txt").write_text("mine")
    before = tree(tmp_path / "proj")
    proc = start_paused(tmp_path, "replace", "--force", "--epochs", "5")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    after = tree(tmp_path / "proj")
    assert after["notes.txt"] == b"mine" and set(after) == set(before)
    assert after[ANSWERS_FILE] == before[ANSWERS_FILE]  # the answers file is last
    again = run_genie(
        "new", "proj", "--yes", "--no-smoke", "--force", "--epochs", "5", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert_complete(tmp_path / "proj")
    final = tree(tmp_path / "proj")
    # every file was whole when it was killed: the old version or the new one
    assert all(after[p] in (before[p], final[p]) for p in after)
    assert after != before and after != final  # killed half way through
    assert final["notes.txt"] == b"mine"
    assert "epochs: 5" in (tmp_path / "proj" / ANSWERS_FILE).read_text()
    assert staging_dirs(tmp_path) == []


def test_ctrl_c_while_writing_exits_130_and_writes_nothing(tmp_path):
    proc = start_paused(tmp_path, "staging")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted; nothing written" in err
    assert "Traceback" not in err
    assert not (tmp_path / "proj").exists() and staging_dirs(tmp_path) == []


def test_ctrl_c_in_the_wizard_exits_130_and_writes_nothing(tmp_path, monkeypatch, capsys):
    wizard_raises(monkeypatch, KeyboardInterrupt)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["new", str(tmp_path / "proj"), "--no-smoke"])
    assert exit_.value.code == 130
    assert "interrupted; nothing written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_force_never_touches_a_file_the_user_wrote_or_changed(tmp_path):
    assert run_genie("new", "proj", "--yes", "--no-smoke", cwd=tmp_path).returncode == 0
    project = tmp_path / "proj"
    (project / "notes.txt").write_text("mine")
    (project / "checkpoints").mkdir()
    (project / "checkpoints" / "last.pt").write_bytes(b"weights")
    with open(project / "model.py", "a") as f:
        f.write("# my change\n")
    before = tree(project)
    refused = run_genie(
        "new", "proj", "--yes", "--no-smoke", "--force", "--epochs", "9", cwd=tmp_path
    )
    assert refused.returncode == 2 and "model.py" in refused.stderr
    assert tree(project) == before  # nothing changed at all
    (project / "model.py").unlink()  # the user moves their change away; their files stay
    forced = run_genie(
        "new", "proj", "--yes", "--no-smoke", "--force", "--epochs", "9", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr
    after = tree(project)
    assert after["notes.txt"] == b"mine" and after["checkpoints/last.pt"] == b"weights"
    assert_complete(project)
