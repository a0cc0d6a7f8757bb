"""A SIGKILL of a whole launch in the middle of a checkpoint save, for the restart tests
(tests/e2e/test_restarts_e2e.py): on PYTHONPATH, Python imports this module at start.

With ``GENIE_KILL_IN_SAVE=NAME:N`` set, train.py's rank 0 (or its only process) counts the
moments a save commits a file named NAME (renamed into place, or, with no rename, opened
for writing: the HF Trainer's trainer_state.json); at the N-th, before it commits, it
kills the launch's process group (the launch script and torchrun, or the single process)
with SIGKILL, as a lost node or an OOM kill would. Every file of that save written before
the commit stays as it was; the workers must end with torchrun.

With ``GENIE_SLOW_SAVE=NAME:SECONDS`` set, rank 0 sleeps that long before the first commit
of NAME: a save as slow as a large model's (tests/e2e/test_long_runs_e2e.py)."""

from __future__ import annotations

import builtins
import os
import signal
import sys
import time

WANTED = os.environ.get("GENIE_KILL_IN_SAVE", "")
SLOW = os.environ.get("GENIE_SLOW_SAVE", "")
IN_TRAIN = os.path.basename(sys.argv[0] if sys.argv else "") == "train.py"
RANK_0 = IN_TRAIN and os.environ.get("RANK", "0") == "0"


def before_commit(act) -> None:
    """Call ``act(path)`` before every rename (os.replace, os.rename) onto ``path``."""

    def wrap(rename):
        def wrapped(src, dst, *args, **kwargs):
            act(dst)
            return rename(src, dst, *args, **kwargs)

        return wrapped

    os.replace = wrap(os.replace)
    os.rename = wrap(os.rename)


if SLOW and RANK_0:
    SLOW_NAME, _, SECONDS = SLOW.rpartition(":")
    _slowed = [False]

    def _maybe_sleep(path) -> None:
        if os.path.basename(os.fspath(path)) == SLOW_NAME and not _slowed[0]:
            _slowed[0] = True
            print(f"GENIE_SLOW_SAVE: {SECONDS} s before {path} is committed", flush=True)
            time.sleep(float(SECONDS))

    before_commit(_maybe_sleep)

if WANTED and RANK_0:
    NAME, _, COUNT = WANTED.rpartition(":")
    seen = [0]

    def _maybe_kill(path) -> None:
        if os.path.basename(os.fspath(path)) != NAME:
            return
        seen[0] += 1
        if seen[0] < int(COUNT):
            return
        print(f"GENIE_KILL_IN_SAVE: SIGKILL before {path} is committed", flush=True)
        if "TORCHELASTIC_RUN_ID" not in os.environ:  # one process, in the launch's group
            os.killpg(os.getpgid(0), signal.SIGKILL)
        # A torchrun worker runs in a session of its own: the launch's group is its
        # parent's. The worker must end with torchrun (dist_utils.end_with_torchrun);
        # if it does not, it waits here, uncommitted, for the test to see it, then ends.
        os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
        time.sleep(10)
        os.kill(os.getpid(), signal.SIGKILL)

    def _open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and "w" in mode and NAME.endswith(".json"):
            _maybe_kill(file)
        return _real_open(file, mode, *args, **kwargs)

    before_commit(_maybe_kill)
    _real_open = builtins.open
    builtins.open = _open
