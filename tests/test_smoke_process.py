"""The smoke test's timeout leaves no process of the run behind."""

from __future__ import annotations

import os
import time

from genie.smoke import process


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_timeout_kills_a_process_that_left_the_tree(tmp_path):
    # the subshell starts a sleep in a session of its own and exits: the sleep is
    # re-parented (no longer below the process that was started), as the ranks are when
    # torchrun dies before them
    script = "(setsid sleep 300 & echo $! > orphan) ; sleep 300"
    env = {"PATH": os.environ["PATH"]}
    started = time.monotonic()
    out = process.execute(["bash", "-c", script], tmp_path, env, timeout=2)
    assert out.timed_out and time.monotonic() - started < 30
    orphan = int((tmp_path / "orphan").read_text())
    assert not _alive(orphan)


def test_a_run_that_ends_by_itself_is_left_alone(tmp_path):
    out = process.execute(["bash", "-c", "echo done"], tmp_path, {"PATH": os.environ["PATH"]}, 30)
    assert (out.returncode, out.lines, out.timed_out) == (0, ["done\n"], False)
