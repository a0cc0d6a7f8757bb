"""Lightning's and the HF Trainer's own progress bars on a real terminal (issue 13): no
log line is ever glued onto a bar, and the run still ends with its one summary line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pexpect
import pytest

from .conftest import OFFLINE, THIS_PYTHON, generate

pytestmark = pytest.mark.e2e
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colour, cursor moves, line erases
# Where a log line starts: the project's own prefix (Lightning's dist_utils format, the
# HF project's basicConfig), and the libraries' own loggers.
LOG_START = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[rank \d+\]|INFO:train:|\[transformers\]"
    r"|`Trainer\.fit` stopped"
)


def screen_lines(stream: str) -> list[str]:
    """What a terminal shows line by line: a carriage return starts the line again (a
    bar redraws itself that way), so each piece between \\r and \\n begins at column 0."""
    return [x for x in re.split(r"[\r\n]+", ESCAPE.sub("", stream)) if x.strip()]


def run_on_a_terminal(project: Path, tmp_path: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(OFFLINE, **THIS_PYTHON, TERM="xterm", COLUMNS="120", LINES="40")
    child = pexpect.spawn(
        "bash", ["launch/single_node.sh", "--smoke", "--checkpoint-dir", str(tmp_path / "ck")],
        cwd=str(project), env=env, encoding="utf-8", timeout=300, dimensions=(40, 120),
    )  # fmt: skip
    stream = child.read()
    child.close()
    assert child.exitstatus == 0, stream[-3000:]
    return stream


@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_log_lines_start_their_own_line_under_the_frameworks_bar(tmp_path, framework):
    project = generate(tmp_path, "--framework", framework, "--task", "custom")
    lines = screen_lines(run_on_a_terminal(project, tmp_path))
    assert any("it/s" in x for x in lines), lines[-20:]  # a bar was really drawn
    glued = [x for x in lines if (m := LOG_START.search(x)) and m.start() > 0]
    assert not glued, glued
    assert not [x for x in lines if re.search(r"it/s.*\]\S", x)]  # nothing after a bar
    done = [x for x in lines if LOG_START.match(x) and "done: " in x]
    assert len(done) == 1 and "2/2 epochs, best validation accuracy" in done[0], lines[-5:]
    assert f"checkpoints in {tmp_path / 'ck'}/" in done[0]
